// The CA's key material: the signing certificate and key, the chain from it up to the root, and
// the roots workloads should trust. Loaded from plugged-in files or from the persisted
// self-signed state; both are directories of PEM files.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type * as x509 from '@peculiar/x509';
import { importPrivateKey, parseCertificates, signLeaf, toPem, type Signer } from './pki.js';

export interface KeyCertBundle extends Signer {
  /** PEM of the signing key. */
  readonly keyPem: string;
  /** From the signing certificate up to (not including) the root; empty for a self-signed root. */
  readonly chain: readonly x509.X509Certificate[];
  /** Roots workloads trust: the current one first; during a rollover the previous one too. */
  readonly roots: readonly x509.X509Certificate[];
}

/** File names of a plugged-in CA (the Go mesh's `cacerts` layout) and of the persisted self-signed one. */
export const CA_FILES = { cert: 'ca-cert.pem', key: 'ca-key.pem', root: 'root-cert.pem', chain: 'cert-chain.pem' } as const;

function read(dir: string, name: string): string {
  const path = join(dir, name);
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(`${path}: cannot read: ${(e as Error).message}`);
  }
}

/** True when `dir` holds a plugged-in CA (its signing certificate and key). */
export function hasPluggedInCa(dir: string): boolean {
  return existsSync(join(dir, CA_FILES.cert)) && existsSync(join(dir, CA_FILES.key));
}

/**
 * A plugged-in intermediate CA: ca-cert.pem (signing cert), ca-key.pem, root-cert.pem (the
 * root(s)), cert-chain.pem (ca-cert and its issuers; may end with the root). The key must match
 * the certificate and the chain must verify up to a root, else the CA does not start.
 */
export async function loadPluggedIn(dir: string): Promise<KeyCertBundle> {
  const [cert] = parseCertificates(read(dir, CA_FILES.cert), join(dir, CA_FILES.cert));
  const { key, pem } = await importPrivateKey(read(dir, CA_FILES.key), join(dir, CA_FILES.key));
  const roots = parseCertificates(read(dir, CA_FILES.root), join(dir, CA_FILES.root));
  const chainFile = join(dir, CA_FILES.chain);
  const chainAll = existsSync(chainFile) ? parseCertificates(read(dir, CA_FILES.chain), chainFile) : [cert!];
  const rootThumbs = new Set(roots.map((r) => r.toString('base64')));
  const chain = chainAll.filter((c) => !rootThumbs.has(c.toString('base64')));
  if (chain.length === 0 || !chain[0]!.equal(cert!)) chain.unshift(cert!);
  const bundle = { cert: cert!, key, keyPem: pem, chain, roots };
  await checkBundle(bundle, dir);
  return bundle;
}

/** The key signs for the certificate, which is a CA, and each link verifies up to a trusted root. */
async function checkBundle(b: KeyCertBundle, where: string): Promise<void> {
  const probe = await signLeaf(b, { publicKey: b.cert.publicKey, uris: ['spiffe://probe/ns/probe/sa/probe'], dnsNames: [], ttlMs: 60_000 });
  if (!(await probe.verify({ publicKey: b.cert.publicKey, signatureOnly: true }))) throw new Error(`${where}: ${CA_FILES.key} does not match ${CA_FILES.cert}`);
  const links = [...b.chain];
  for (let i = 0; i < links.length; i++) {
    const child = links[i]!;
    const parents = i + 1 < links.length ? [links[i + 1]!] : b.roots;
    let ok = false;
    for (const p of parents) if (await child.verify({ publicKey: p.publicKey, signatureOnly: true })) ok = true;
    if (!ok) throw new Error(`${where}: certificate "${child.subject}" is not signed by ${i + 1 < links.length ? `"${links[i + 1]!.subject}" (next in ${CA_FILES.chain})` : `any certificate of ${CA_FILES.root}`}`);
  }
}

/** The persisted self-signed CA, or undefined when `dir` holds none yet. */
export async function loadSelfSigned(dir: string): Promise<KeyCertBundle | undefined> {
  if (!hasPluggedInCa(dir)) return undefined;
  const [cert] = parseCertificates(read(dir, CA_FILES.cert), join(dir, CA_FILES.cert));
  const { key, pem } = await importPrivateKey(read(dir, CA_FILES.key), join(dir, CA_FILES.key));
  const rootFile = join(dir, CA_FILES.root);
  const roots = existsSync(rootFile) ? parseCertificates(read(dir, CA_FILES.root), rootFile) : [cert!];
  return { cert: cert!, key, keyPem: pem, chain: [], roots: roots.filter((r) => r.notAfter.getTime() > Date.now()) };
}

/** Writes the self-signed state atomically per file (key readable by the owner only). */
export function saveSelfSigned(dir: string, b: KeyCertBundle): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const write = (name: string, text: string, mode: number): void => {
    const tmp = join(dir, `.${name}.tmp`);
    writeFileSync(tmp, text, { mode });
    renameSync(tmp, join(dir, name));
  };
  write(CA_FILES.key, b.keyPem, 0o600);
  write(CA_FILES.cert, toPem([b.cert]), 0o644);
  write(CA_FILES.root, toPem(b.roots), 0o644);
}
