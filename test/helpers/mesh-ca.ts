// A discovery server with its CA on loopback, the sample issuer minting workload tokens, and
// small helpers to ask the CA for certificates as an agent does.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server } from 'node:http';
import { X509Certificate } from 'node:crypto';
import { startIssuer } from '../../samples/apps/issuer.js';
import { requestCertificate, type CaCredential } from '../../src/agent/sds/ca-client.js';
import { createCsr, generateKeyPair, type KeyPair } from '../../src/security/ca/pki.js';
import { discoveryArgs, Running, start } from './proc.js';

export const SERVER_NAME = 'meshd.mesh-system.svc';

export interface Issuer {
  readonly url: string;
  readonly server: Server;
  /** A token for service account `sa` of namespace `ns` (audience mesh-ca unless given). */
  token(ns: string, sa: string, aud?: string): Promise<string>;
}

export async function sampleIssuer(): Promise<Issuer> {
  const { server, issuer } = await startIssuer(join(mkdtempSync(join(tmpdir(), 'mesh-ca-issuer-')), 'key.json'), 0);
  return {
    url: issuer,
    server,
    token: async (ns, sa, aud = 'mesh-ca') => {
      const q = new URLSearchParams({ sub: `system:serviceaccount:${ns}:${sa}`, ...(aud ? { aud } : {}) });
      return (await (await fetch(`${issuer}/token?${q}`)).text()).trim();
    },
  };
}

export interface CaDiscovery {
  readonly proc: Running;
  readonly secureAddress: string;
  readonly grpcAddress: string;
  readonly monitoring: string;
  readonly caDir: string;
  rootPem(): string;
  metric(name: string): Promise<number>;
}

/** Starts pilot-discovery (`args`: discoveryArgs() unless given) with its CA kept in `caDir` (a new temp dir unless given). */
export async function startCaDiscovery(env: NodeJS.ProcessEnv, caDir = mkdtempSync(join(tmpdir(), 'mesh-ca-')), args = discoveryArgs()): Promise<CaDiscovery> {
  const proc = new Running(start('pilot-discovery', args, { env: { AUTHORITY_SELF_SIGNED_CA_DIR: caDir, ...env } }));
  const [, secure] = await proc.waitFor(/secured gRPC server \(xDS and CA, TLS\) listening on (\S+)/, 30_000);
  const [, grpc] = await proc.waitFor(/gRPC xDS server listening on (\S+)/);
  const [, monitoring] = await proc.waitFor(/monitoring server listening on (\S+)/);
  return {
    proc,
    secureAddress: secure!,
    grpcAddress: grpc!,
    monitoring: monitoring!,
    caDir,
    rootPem: () => readFileSync(join(env.ROOT_CA_DIR ?? caDir, 'root-cert.pem'), 'utf8'),
    metric: async (name) => {
      const text = await (await fetch(`http://${monitoring}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(`${name} `));
      return line ? Number(line.split(' ')[1]) : 0;
    },
  };
}

export interface Issued {
  readonly keys: KeyPair;
  readonly chain: string[];
  readonly leaf: X509Certificate;
}

/** Asks the CA for a certificate for `uri` with the given credential. */
export async function issue(d: Pick<CaDiscovery, 'secureAddress' | 'rootPem'>, uri: string, cred: CaCredential, ttlSeconds = 3600): Promise<Issued> {
  const keys = await generateKeyPair({ kind: 'ECDSA', curve: 'P-256' });
  const chain = await requestCertificate({ address: d.secureAddress, rootPem: d.rootPem(), serverName: SERVER_NAME }, cred, await createCsr(keys, [uri]), ttlSeconds);
  return { keys, chain, leaf: new X509Certificate(chain[0]!) };
}

/** The sample issuer and a discovery server trusting it (plus `env`), both stopped after the test. */
export async function caFixture(t: { after(fn: () => Promise<void> | void): void }, env: NodeJS.ProcessEnv = {}, args?: string[]): Promise<{ issuer: Issuer; d: CaDiscovery }> {
  const issuer = await sampleIssuer();
  const d = await startCaDiscovery({ TOKEN_ISSUER: issuer.url, ...env }, undefined, args);
  t.after(async () => {
    await d.proc.stop();
    issuer.server.close();
  });
  return { issuer, d };
}
