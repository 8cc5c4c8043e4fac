// X.509 building blocks of the mesh CA and the agent, on @peculiar/x509 over Node's WebCrypto:
// key pairs, self-signed roots, CSRs for a SPIFFE identity, and signing a CSR into a workload
// certificate. No ASN.1 is written by hand here.
import { createPrivateKey, webcrypto, type KeyObject } from 'node:crypto';
// @peculiar/x509 resolves its ASN.1 handlers through tsyringe, which needs the Reflect polyfill loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;
export type { CryptoKey };

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
const SAN_OID = '2.5.29.17';

export type KeyAlgorithm = { readonly kind: 'RSA'; readonly bits: number } | { readonly kind: 'ECDSA'; readonly curve: 'P-256' | 'P-384' };

export interface KeyPair {
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
  /** PKCS#8 PEM of the private key. */
  readonly pem: string;
}

const RSA_SIGN = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } as const;

/** The WebCrypto algorithm that signs with a key of this kind. */
function signing(alg: KeyAlgorithm): webcrypto.RsaHashedImportParams | webcrypto.EcdsaParams {
  return alg.kind === 'RSA' ? RSA_SIGN : { name: 'ECDSA', hash: alg.curve === 'P-384' ? 'SHA-384' : 'SHA-256' };
}

function importParams(alg: KeyAlgorithm): webcrypto.RsaHashedImportParams | webcrypto.EcKeyImportParams {
  return alg.kind === 'RSA' ? { ...RSA_SIGN } : { name: 'ECDSA', namedCurve: alg.curve };
}

export async function generateKeyPair(alg: KeyAlgorithm): Promise<KeyPair> {
  const params: webcrypto.RsaHashedKeyGenParams | webcrypto.EcKeyGenParams =
    alg.kind === 'RSA' ? { ...RSA_SIGN, modulusLength: alg.bits, publicExponent: new Uint8Array([1, 0, 1]) } : { name: 'ECDSA', namedCurve: alg.curve };
  const keys = (await webcrypto.subtle.generateKey(params, true, ['sign', 'verify'])) as CryptoKeyPair;
  const der = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { privateKey: keys.privateKey, publicKey: keys.publicKey, pem: x509.PemConverter.encode(der, 'PRIVATE KEY') };
}

/**
 * A private key as PEM the way the Go mesh's agent writes it: PKCS#8 (`PRIVATE KEY`) with
 * PKCS8_KEY, else PKCS#1 (`RSA PRIVATE KEY`) for RSA and SEC1 (`EC PRIVATE KEY`) for ECDSA.
 */
export function privateKeyPem(key: KeyPair, pkcs8: boolean): string {
  if (pkcs8) return key.pem;
  const obj = createPrivateKey(key.pem);
  return obj.export({ format: 'pem', type: obj.asymmetricKeyType === 'rsa' ? 'pkcs1' : 'sec1' }).toString();
}

/** The algorithm of a PEM private key (PKCS#8, PKCS#1 or SEC1). */
export function keyAlgorithm(key: KeyObject): KeyAlgorithm {
  if (key.asymmetricKeyType === 'rsa') return { kind: 'RSA', bits: key.asymmetricKeyDetails?.modulusLength ?? 2048 };
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    if (curve === 'prime256v1' || curve === 'P-256') return { kind: 'ECDSA', curve: 'P-256' };
    if (curve === 'secp384r1' || curve === 'P-384') return { kind: 'ECDSA', curve: 'P-384' };
    throw new Error(`unsupported EC curve ${String(curve)} (expected P-256 or P-384)`);
  }
  throw new Error(`unsupported key type ${String(key.asymmetricKeyType)} (expected RSA or EC)`);
}

/** Loads a PEM private key for signing; `what` names it in errors. */
export async function importPrivateKey(pem: string, what: string): Promise<{ key: CryptoKey; alg: KeyAlgorithm; pem: string }> {
  let obj: KeyObject;
  try {
    obj = createPrivateKey(pem);
  } catch (e) {
    throw new Error(`${what}: not a PEM private key: ${(e as Error).message}`);
  }
  const alg = keyAlgorithm(obj);
  const der = obj.export({ type: 'pkcs8', format: 'der' });
  const key = await webcrypto.subtle.importKey('pkcs8', der, importParams(alg), true, ['sign']);
  return { key, alg, pem };
}

export function algorithmOf(key: CryptoKey): KeyAlgorithm {
  const a = key.algorithm as webcrypto.RsaHashedKeyAlgorithm | webcrypto.EcKeyAlgorithm;
  if (a.name === 'ECDSA') return { kind: 'ECDSA', curve: (a as webcrypto.EcKeyAlgorithm).namedCurve === 'P-384' ? 'P-384' : 'P-256' };
  return { kind: 'RSA', bits: (a as webcrypto.RsaHashedKeyAlgorithm).modulusLength };
}

/** All PEM certificates in a text, in order; an error names `what` when there is none or one is bad. */
export function parseCertificates(pem: string, what: string): x509.X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error(`${what}: no PEM certificate found`);
  return blocks.map((b, i) => {
    try {
      return new x509.X509Certificate(b);
    } catch (e) {
      throw new Error(`${what}: certificate ${i + 1} cannot be parsed: ${(e as Error).message}`);
    }
  });
}

export function toPem(certs: readonly x509.X509Certificate[]): string {
  return certs.map((c) => c.toString('pem')).join('\n') + '\n';
}

function randomSerial(): string {
  const bytes = webcrypto.getRandomValues(new Uint8Array(16));
  bytes[0]! &= 0x7f; // positive
  return Buffer.from(bytes).toString('hex');
}

/** A self-signed CA root for the trust domain (organization = trust domain, as the Go mesh names it). */
export async function createSelfSignedRoot(keys: KeyPair, trustDomain: string, ttlMs: number, now = new Date()): Promise<x509.X509Certificate> {
  return x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: [{ O: [trustDomain] }],
    notBefore: now,
    notAfter: new Date(now.getTime() + ttlMs),
    signingAlgorithm: signing(algorithmOf(keys.privateKey)),
    keys: { privateKey: keys.privateKey, publicKey: keys.publicKey },
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
}

/** A CSR whose subject alternative names are `uris` (SPIFFE ids) and `dnsNames`. */
export async function createCsr(keys: KeyPair, uris: readonly string[], dnsNames: readonly string[] = []): Promise<string> {
  const names: x509.JsonGeneralNames = [...uris.map((value) => ({ type: 'url' as const, value })), ...dnsNames.map((value) => ({ type: 'dns' as const, value }))];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    keys: { privateKey: keys.privateKey, publicKey: keys.publicKey },
    signingAlgorithm: signing(algorithmOf(keys.privateKey)),
    extensions: [new x509.SubjectAlternativeNameExtension(names)],
  });
  return csr.toString('pem');
}

export interface CsrNames {
  readonly uris: string[];
  readonly dnsNames: string[];
  readonly publicKey: x509.PublicKey;
}

/** Parses and verifies (self-signature) a PEM CSR; throws what is wrong with it. */
export async function readCsr(pem: string): Promise<CsrNames> {
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(pem.trim());
  } catch (e) {
    throw new Error(`not a PEM PKCS#10 certificate request: ${(e as Error).message}`);
  }
  if (!(await csr.verify())) throw new Error('the CSR signature does not verify against its public key');
  const ext = csr.getExtension(SAN_OID);
  const san = ext === null ? null : ext instanceof x509.SubjectAlternativeNameExtension ? ext : new x509.SubjectAlternativeNameExtension(ext.rawData);
  return { ...sanOf(san), publicKey: csr.publicKey };
}

function sanOf(san: x509.SubjectAlternativeNameExtension | null): { uris: string[]; dnsNames: string[] } {
  const items = san?.names.items ?? [];
  return { uris: items.filter((n) => n.type === 'url').map((n) => n.value), dnsNames: items.filter((n) => n.type === 'dns').map((n) => n.value) };
}

/** The URI SANs of a certificate (where a workload certificate carries its SPIFFE id). */
export function certificateUris(cert: x509.X509Certificate): string[] {
  return sanOf(cert.getExtension(x509.SubjectAlternativeNameExtension)).uris;
}

export interface Signer {
  readonly cert: x509.X509Certificate;
  readonly key: CryptoKey;
}

export interface LeafRequest {
  readonly publicKey: x509.PublicKey;
  readonly uris: readonly string[];
  readonly dnsNames: readonly string[];
  readonly ttlMs: number;
  readonly now?: Date;
}

/**
 * A workload (leaf) certificate: no subject, the identities as critical SANs (the SPIFFE X.509
 * profile), client and server auth, never past the signer's own expiry.
 */
export async function signLeaf(signer: Signer, req: LeafRequest): Promise<x509.X509Certificate> {
  const now = req.now ?? new Date();
  const notAfter = new Date(Math.min(now.getTime() + req.ttlMs, signer.cert.notAfter.getTime()));
  const names: x509.JsonGeneralNames = [...req.uris.map((value) => ({ type: 'url' as const, value })), ...req.dnsNames.map((value) => ({ type: 'dns' as const, value }))];
  return x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: [],
    issuer: signer.cert.subjectName,
    notBefore: now,
    notAfter,
    publicKey: req.publicKey,
    signingKey: signer.key,
    signingAlgorithm: signing(algorithmOf(signer.key)),
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      await x509.AuthorityKeyIdentifierExtension.create(signer.cert, false),
      new x509.SubjectAlternativeNameExtension(names, true),
    ],
  });
}
