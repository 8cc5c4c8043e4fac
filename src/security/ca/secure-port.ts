// The discovery server's secured gRPC port (:15012): TLS with a serving certificate the mesh CA
// issues for `meshd.<namespace>.svc` (and MESHD_CUSTOM_HOST), client certificates requested and
// verified against the mesh roots (and the federated ones of SPIFFE_BUNDLE_ENDPOINTS) but not
// required (a workload without a certificate yet authenticates with a token). A root rotation
// re-issues the serving certificate and swaps the trusted roots in place, without rebinding; a
// federated bundle that changes swaps the trusted roots only.
import 'reflect-metadata';
import { PublicKey } from '@peculiar/x509';
import type { SecureContextOptions } from 'node:tls';
import { scope } from '../../common/log.js';
import type { MeshAuthority } from './authority.js';
import { generateKeyPair, signLeaf, toPem } from './pki.js';
import { RotatingTlsCredentials } from './transport.js';

const log = scope('serverca');

/** Serving certificates are renewed at half their life, as workload certificates are. */
const SERVING_TTL_MS = 24 * 3600_000;

export interface SecurePortOptions {
  readonly authority: MeshAuthority;
  /** DNS names of the serving certificate. */
  readonly hosts: readonly string[];
  /** PEM of the federated roots, current; trusted for client certificates beside the mesh roots. */
  readonly federatedPem?: () => string;
}

interface Serving {
  readonly key: string;
  readonly cert: string;
}

/** The host names of the discovery server's certificate: meshd.<ns>.svc plus MESHD_CUSTOM_HOST (comma-separated). */
export function servingHosts(namespace: string, customHost: string): string[] {
  return [`meshd.${namespace}.svc`, ...customHost.split(',').map((h) => h.trim()).filter(Boolean)];
}

export class SecurePortCredentials {
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;

  private constructor(
    private readonly opts: SecurePortOptions,
    private serving: Serving,
    readonly credentials: RotatingTlsCredentials,
  ) {}

  static async create(opts: SecurePortOptions): Promise<SecurePortCredentials> {
    const serving = await issueServing(opts);
    const port = new SecurePortCredentials(opts, serving, new RotatingTlsCredentials(context(opts, serving)));
    port.unsubscribe = opts.authority.onChange(() => void port.refresh('the CA root rotated'));
    port.schedule();
    return port;
  }

  /** Re-issues the serving certificate (new roots trusted at once); on failure keeps the current one. */
  async refresh(why: string): Promise<void> {
    try {
      this.serving = await issueServing(this.opts);
      this.credentials.update(context(this.opts, this.serving));
      log.info(`serving certificate for ${this.opts.hosts.join(', ')} re-issued: ${why}`);
    } catch (e) {
      log.error(`cannot re-issue the serving certificate, keeping the current one: ${(e as Error).message}`);
    }
    this.schedule();
  }

  /** The trusted roots changed (a federated bundle): same serving certificate, new `ca`. */
  retrust(): void {
    this.credentials.update(context(this.opts, this.serving));
  }

  private schedule(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.refresh('renewal at half its life'), SERVING_TTL_MS / 2);
    this.timer.unref();
  }

  close(): void {
    clearTimeout(this.timer);
    this.unsubscribe?.();
  }
}

async function issueServing(opts: SecurePortOptions): Promise<Serving> {
  const keys = await generateKeyPair({ kind: 'ECDSA', curve: 'P-256' });
  const b = opts.authority.bundle;
  const leaf = await signLeaf(b, { publicKey: await PublicKey.create(keys.publicKey), uris: [], dnsNames: opts.hosts, ttlMs: SERVING_TTL_MS });
  return { key: keys.pem, cert: toPem([leaf, ...b.chain]) };
}

function context(opts: SecurePortOptions, serving: Serving): SecureContextOptions {
  return { ...serving, ca: toPem(opts.authority.bundle.roots) + (opts.federatedPem?.() ?? '') };
}
