// Credentials of the agent's connection to the discovery server, from XDS_ROOT_CA:
// a file path = TLS trusting that root (the mesh CA's root certificate), `SYSTEM` = TLS trusting
// the system roots, empty = plaintext (the discovery server's :15010, what a local mesh uses).
import { readFileSync } from 'node:fs';
import { credentials, type ChannelCredentials } from '@grpc/grpc-js';
import { setting } from '../common/env.js';
import { scope } from '../common/log.js';

const log = scope('xdsproxy');

/** The discovery server's TLS port: plaintext to it cannot work. */
const SECURE_PORT = ':15012';

export function xdsCredentials(discoveryAddress: string): ChannelCredentials {
  const root = setting('XDS_ROOT_CA');
  if (root === '') {
    if (discoveryAddress.endsWith(SECURE_PORT)) {
      log.warn(`discovery address ${discoveryAddress} is the TLS port but XDS_ROOT_CA is not set; connecting in plaintext. Set XDS_ROOT_CA to the root certificate file (or SYSTEM), or use the plaintext port :15010`);
    }
    return credentials.createInsecure();
  }
  if (root === 'SYSTEM') return credentials.createSsl();
  let pem: Buffer;
  try {
    pem = readFileSync(root);
  } catch (e) {
    throw new Error(`XDS_ROOT_CA=${JSON.stringify(root)}: cannot read the root certificate: ${(e as Error).message}`);
  }
  return credentials.createSsl(pem);
}
