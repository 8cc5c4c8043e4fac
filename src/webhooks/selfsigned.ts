// A self-signed serving certificate for the webhook server when no --tlsCertFile/--tlsKeyFile is
// given, valid for the service's DNS names (and MESHD_CUSTOM_HOST) so the orchestrator's TLS check
// passes once its CA bundle holds this certificate.

import { webcrypto } from 'node:crypto';
// @peculiar/x509's dependency injection needs the Reflect metadata API loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';

export interface ServingCertificate {
  certPem: string;
  keyPem: string;
}

/** @peculiar/x509 types its provider with the DOM `Crypto`, which Node's webcrypto implements. */
type WebCrypto = Parameters<typeof x509.X509CertificateGenerator.createSelfSigned>[1];

const VALIDITY_MS = 365 * 24 * 3600 * 1000;
const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

export async function selfSignedCertificate(dnsNames: readonly string[]): Promise<ServingCertificate> {
  if (dnsNames.length === 0) throw new Error('a serving certificate needs at least one DNS name');
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(16))).toString('hex').replace(/^[89a-f]/, '1'),
      name: `CN=${dnsNames[0]}`,
      notBefore: new Date(now - 60_000),
      notAfter: new Date(now + VALIDITY_MS),
      signingAlgorithm: ALGORITHM,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension(dnsNames.map((value) => ({ type: 'dns' as const, value }))),
      ],
    },
    webcrypto as unknown as WebCrypto,
  );
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { certPem: cert.toString('pem'), keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') };
}
