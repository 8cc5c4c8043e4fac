// The mesh CA of the discovery server: a plugged-in intermediate (ROOT_CA_DIR holding ca-cert.pem,
// ca-key.pem, root-cert.pem, cert-chain.pem) or a self-signed root made at first start and kept in
// a directory, so a restart keeps the same root. The self-signed root is checked every
// AUTHORITY_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL and replaced once the rest of its life is below
// AUTHORITY_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE percent of its lifetime; the old root
// stays trusted (in every issued chain's roots) until it expires.
import type * as x509 from '@peculiar/x509';
import { scope } from '../../common/log.js';
import { gauge } from '../../common/metrics.js';
import { hasPluggedInCa, loadPluggedIn, loadSelfSigned, saveSelfSigned, type KeyCertBundle } from './bundle.js';
import { createSelfSignedRoot, generateKeyPair, signLeaf, toPem, type LeafRequest } from './pki.js';

const log = scope('ca');
const rotatorLog = scope('rootcertrotator');

export interface AuthorityOptions {
  readonly trustDomain: string;
  /** ROOT_CA_DIR: a plugged-in CA when it holds ca-cert.pem and ca-key.pem. */
  readonly pluggedInDir: string;
  /** Where the self-signed CA is kept; undefined = memory only (a new root each start). */
  readonly selfSignedDir: string | undefined;
  readonly selfSignedTtlMs: number;
  readonly rsaKeySize: number;
  /** <= 0 disables the root rotator. */
  readonly checkIntervalMs: number;
  readonly gracePercentile: number;
  readonly jitter: boolean;
}

export class MeshAuthority {
  private current: KeyCertBundle;
  private timer: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<() => void>();

  private constructor(
    private readonly opts: AuthorityOptions,
    bundle: KeyCertBundle,
    readonly selfSigned: boolean,
  ) {
    this.current = bundle;
    this.record();
  }

  /** Loads or creates the CA; a bad plugged-in CA is an error naming the file. */
  static async create(opts: AuthorityOptions): Promise<MeshAuthority> {
    if (hasPluggedInCa(opts.pluggedInDir)) {
      const bundle = await loadPluggedIn(opts.pluggedInDir);
      log.info(`using the plugged-in CA of ${opts.pluggedInDir} (signing certificate "${bundle.cert.subject}", ${bundle.roots.length} root(s))`);
      return new MeshAuthority(opts, bundle, false);
    }
    const dir = opts.selfSignedDir;
    const stored = dir ? await loadSelfSigned(dir) : undefined;
    if (stored) {
      log.info(`using the self-signed CA root kept in ${dir} (expires ${stored.cert.notAfter.toISOString()})`);
      const ca = new MeshAuthority(opts, stored, true);
      await ca.checkRoot();
      return ca;
    }
    const bundle = await newRoot(opts, []);
    if (dir) {
      saveSelfSigned(dir, bundle);
      log.info(`created a self-signed CA root for trust domain ${opts.trustDomain}, kept in ${dir}`);
    } else {
      log.warn(`created a self-signed CA root for trust domain ${opts.trustDomain} in memory only: a restart makes a new root and workloads must renew. Set AUTHORITY_SELF_SIGNED_CA_DIR to keep it`);
    }
    return new MeshAuthority(opts, bundle, true);
  }

  get bundle(): KeyCertBundle {
    return this.current;
  }

  /** The roots workloads trust, PEM (both during a rollover). */
  rootsPem(): string {
    return toPem(this.current.roots);
  }

  /** Called after the roots or the signing certificate changed (a rotation). */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Signs a leaf; the chain is the leaf, the intermediates, then every trusted root. */
  async issue(req: LeafRequest): Promise<x509.X509Certificate[]> {
    const leaf = await signLeaf(this.current, req);
    return [leaf, ...this.current.chain, ...this.current.roots];
  }

  /** Starts the root rotator (self-signed only), after a random delay below the interval when jitter is on. */
  startRotator(): void {
    if (!this.selfSigned || this.opts.checkIntervalMs <= 0) return;
    const interval = this.opts.checkIntervalMs;
    const first = this.opts.jitter ? Math.floor(Math.random() * interval) : interval;
    const tick = (): void => {
      this.checkRoot().catch((e: unknown) => rotatorLog.error(`root certificate check failed, keeping the current root: ${(e as Error).message}`));
      this.timer = setTimeout(tick, interval);
      this.timer.unref();
    };
    this.timer = setTimeout(tick, first);
    this.timer.unref();
  }

  close(): void {
    clearTimeout(this.timer);
  }

  /** Replaces the self-signed root when it is inside its grace period; drops expired old roots. */
  async checkRoot(now = Date.now()): Promise<boolean> {
    if (!this.selfSigned) return false;
    const cert = this.current.cert;
    const lifetime = cert.notAfter.getTime() - cert.notBefore.getTime();
    const left = cert.notAfter.getTime() - now;
    if (left > (lifetime * this.opts.gracePercentile) / 100) return false;
    const keep = this.current.roots.filter((r) => r.notAfter.getTime() > now);
    const next = await newRoot(this.opts, keep);
    if (this.opts.selfSignedDir) saveSelfSigned(this.opts.selfSignedDir, next);
    rotatorLog.info(`CA root rotated: ${Math.max(0, Math.round(left / 1000))}s of its life left (grace ${this.opts.gracePercentile}%); the new root expires ${next.cert.notAfter.toISOString()}, the old one stays trusted until ${cert.notAfter.toISOString()}`);
    this.current = next;
    this.record();
    for (const l of this.listeners) l();
    return true;
  }

  private record(): void {
    const b = this.current;
    const secs = (d: Date): number => Math.floor(d.getTime() / 1000);
    const chainEnd = Math.min(...[b.cert, ...b.chain].map((c) => c.notAfter.getTime()));
    gauge('authority_server_root_cert_expiry_timestamp').set(secs(b.roots[0]?.notAfter ?? b.cert.notAfter));
    gauge('authority_server_cert_chain_expiry_timestamp').set(secs(new Date(chainEnd)));
  }
}

/** A fresh self-signed root; `previous` roots stay trusted after it. */
async function newRoot(opts: AuthorityOptions, previous: readonly x509.X509Certificate[]): Promise<KeyCertBundle> {
  const keys = await generateKeyPair({ kind: 'RSA', bits: opts.rsaKeySize });
  const cert = await createSelfSignedRoot(keys, opts.trustDomain, opts.selfSignedTtlMs);
  return { cert, key: keys.privateKey, keyPem: keys.pem, chain: [], roots: [cert, ...previous.filter((r) => !r.equal(cert))] };
}
