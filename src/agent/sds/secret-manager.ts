// The agent's workload certificate: a key (RSA 2048, or ECDSA P-256 with ECC_SIGNATURE_ALGORITHM),
// a CSR for the workload's SPIFFE id, the CA's signature, and renewal once the certificate enters
// its grace period (SECRET_GRACE_PERIOD_RATIO of its lifetime before expiry). The first request is
// authenticated with the workload's token (or a provisioned certificate, PROV_CERT), renewals too.
// With FILE_MOUNTED_CERTS the certificate comes from files instead, re-read
// when they change. Every new secret is handed to the listeners (the SDS server pushes it) and, with
// OUTPUT_CERTS, written to that directory.
import { EventEmitter } from 'node:events';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, watch, writeFileSync, type FSWatcher } from 'node:fs';
import { join } from 'node:path';
import { scope } from '../../common/log.js';
import { counter } from '../../common/metrics.js';
import { createCsr, generateKeyPair, privateKeyPem, type KeyAlgorithm } from '../../security/ca/pki.js';
import { requestCertificate, type CaClientOptions, type CaCredential } from './ca-client.js';

const log = scope('sds');

/** The two resources the proxy asks for. */
export const WORKLOAD_SECRET = 'default';
export const ROOT_SECRET = 'ROOTCA';

export interface WorkloadSecret {
  readonly keyPem: string;
  /** Leaf first, then intermediates. */
  readonly chainPem: string;
  /** The roots to trust (during a CA root rollover, both). */
  readonly rootPem: string;
  readonly notAfter: Date;
}

/** File names of mounted, provisioned and output certificates (the Go mesh's layout). */
export const CERT_FILES = { chain: 'cert-chain.pem', key: 'key.pem', root: 'root-cert.pem' } as const;

export type SecretSource =
  | {
      readonly kind: 'ca';
      readonly ca: CaClientOptions;
      readonly spiffeId: string;
      /** Reads the workload's token (called per request: tokens are rotated by whoever mounts them). */
      readonly token: () => string;
      /** PROV_CERT: a directory with a provisioned key and chain that authenticate the first request. */
      readonly provisionedDir?: string;
      readonly keyAlgorithm: KeyAlgorithm;
      /** PKCS8_KEY: the key's PEM is PKCS#8; else PKCS#1 (RSA) or SEC1 (ECDSA), as the Go mesh's agent. */
      readonly pkcs8?: boolean;
      /** SECRET_TTL, ms. */
      readonly ttlMs: number;
    }
  | { readonly kind: 'files'; readonly dir: string };

export interface SecretManagerOptions {
  readonly source: SecretSource;
  /** SECRET_GRACE_PERIOD_RATIO. */
  readonly graceRatio: number;
  /** OUTPUT_CERTS; undefined = not written. */
  readonly outputDir?: string;
  /** Retry delay after a failed request, doubling up to a minute. */
  readonly retryMs?: number;
}

const MAX_RETRY_MS = 60_000;

/** Splits a CA answer into the workload chain and the roots (self-signed certificates). */
export function splitChain(pems: readonly string[]): { chainPem: string; rootPem: string; notAfter: Date } {
  const certs = pems.map((p) => new X509Certificate(p));
  const isRoot = (c: X509Certificate): boolean => c.checkIssued(c) && c.verify(c.publicKey);
  const chain = certs.filter((c) => !isRoot(c));
  const roots = certs.filter(isRoot);
  if (chain.length === 0 || roots.length === 0) throw new Error(`the CA answered ${certs.length} certificate(s) without ${chain.length === 0 ? 'a workload certificate' : 'a root'}`);
  const pem = (cs: X509Certificate[]): string => cs.map((c) => c.toString().trim() + '\n').join('');
  return { chainPem: pem(chain), rootPem: pem(roots), notAfter: new Date(chain[0]!.validTo) };
}

export class SecretManager extends EventEmitter<{ update: [WorkloadSecret] }> {
  private current: WorkloadSecret | undefined;
  private timer: NodeJS.Timeout | undefined;
  private watcher: FSWatcher | undefined;
  private closed = false;
  private retryMs: number;

  constructor(private readonly opts: SecretManagerOptions) {
    super();
    this.retryMs = opts.retryMs ?? 1_000;
  }

  get secret(): WorkloadSecret | undefined {
    return this.current;
  }

  /** The first secret; rejects when it cannot be had (the agent does not start without one). */
  async start(): Promise<WorkloadSecret> {
    const src = this.opts.source;
    if (src.kind === 'files') {
      this.set(readMounted(src.dir));
      this.watcher = watch(src.dir, () => this.reloadMounted(src.dir));
      return this.current!;
    }
    await this.renew();
    return this.current!;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.watcher?.close();
  }

  /** Gets a new certificate now; the next renewal is scheduled from it. */
  async renew(): Promise<void> {
    const src = this.opts.source;
    if (src.kind !== 'ca') return;
    const keys = await generateKeyPair(src.keyAlgorithm);
    const csr = await createCsr(keys, [src.spiffeId]);
    const answer = await requestCertificate(src.ca, this.credential(src), csr, src.ttlMs / 1000);
    const split = splitChain(answer);
    this.set({ keyPem: privateKeyPem(keys, src.pkcs8 ?? false), ...split });
    log.info(`workload certificate for ${src.spiffeId} issued, expires ${split.notAfter.toISOString()}`);
  }

  /**
   * Every request, renewals too, with the token, as the Go mesh's agent: a revoked token or a
   * deleted account stops renewals, and after a trust domain change the CA issues the renamed
   * identity; with PROV_CERT, the provisioned certificate.
   */
  private credential(src: Extract<SecretSource, { kind: 'ca' }>): CaCredential {
    if (src.provisionedDir) {
      return { keyPem: readFileSync(join(src.provisionedDir, CERT_FILES.key), 'utf8'), chainPem: readFileSync(join(src.provisionedDir, CERT_FILES.chain), 'utf8') };
    }
    return { token: src.token() };
  }

  private set(s: WorkloadSecret): void {
    this.current = s;
    if (this.opts.outputDir) this.output(this.opts.outputDir, s);
    this.schedule(s);
    this.emit('update', s);
  }

  /** Renewal when the remaining life falls to the grace ratio of the lifetime; retries with backoff. */
  private schedule(s: WorkloadSecret): void {
    if (this.opts.source.kind !== 'ca' || this.closed) return;
    clearTimeout(this.timer);
    const leaf = new X509Certificate(s.chainPem);
    const from = Date.parse(leaf.validFrom);
    const lifetime = s.notAfter.getTime() - from;
    const at = s.notAfter.getTime() - lifetime * this.opts.graceRatio;
    this.timer = setTimeout(() => this.renewInBackground(), Math.max(0, at - Date.now()));
    this.timer.unref();
  }

  private renewInBackground(): void {
    this.renew().then(
      () => (this.retryMs = this.opts.retryMs ?? 1_000),
      (e: unknown) => {
        log.warn(`certificate renewal failed, keeping the current one and retrying in ${this.retryMs} ms: ${(e as Error).message}`);
        if (this.closed) return;
        this.timer = setTimeout(() => this.renewInBackground(), this.retryMs);
        this.timer.unref();
        this.retryMs = Math.min(this.retryMs * 2, MAX_RETRY_MS);
      },
    );
  }

  private reloadMounted(dir: string): void {
    try {
      const s = readMounted(dir);
      if (s.chainPem !== this.current?.chainPem || s.rootPem !== this.current?.rootPem || s.keyPem !== this.current?.keyPem) {
        this.set(s);
        log.info(`mounted certificates in ${dir} changed; pushed`);
      }
    } catch (e) {
      // Files are often replaced one by one: a half-written set keeps the last good secret.
      counter('num_file_secret_failures_total').inc();
      log.warn(`mounted certificates in ${dir} unreadable, keeping the last good ones: ${(e as Error).message}`);
    }
  }

  private output(dir: string, s: WorkloadSecret): void {
    try {
      mkdirSync(dir, { recursive: true });
      for (const [name, text, mode] of [
        [CERT_FILES.key, s.keyPem, 0o600],
        [CERT_FILES.chain, s.chainPem, 0o644],
        [CERT_FILES.root, s.rootPem, 0o644],
      ] as const) {
        const tmp = join(dir, `.${name}.tmp`);
        writeFileSync(tmp, text, { mode });
        renameSync(tmp, join(dir, name));
      }
    } catch (e) {
      counter('num_file_secret_failures_total').inc();
      log.error(`OUTPUT_CERTS=${dir}: cannot write the certificates: ${(e as Error).message}`);
    }
  }
}

/** FILE_MOUNTED_CERTS: key, chain and root from `dir`; the key must match the chain's leaf. */
export function readMounted(dir: string): WorkloadSecret {
  const read = (name: string): string => {
    const path = join(dir, name);
    if (!existsSync(path)) throw new Error(`${path}: missing`);
    return readFileSync(path, 'utf8');
  };
  const keyPem = read(CERT_FILES.key);
  const chainPem = read(CERT_FILES.chain);
  const rootPem = read(CERT_FILES.root);
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(chainPem);
    new X509Certificate(rootPem);
  } catch (e) {
    throw new Error(`${dir}: ${(e as Error).message}`);
  }
  let key;
  try {
    key = createPrivateKey(keyPem);
  } catch (e) {
    throw new Error(`${join(dir, CERT_FILES.key)}: ${(e as Error).message}`);
  }
  if (!leaf.checkPrivateKey(key)) throw new Error(`${join(dir, CERT_FILES.key)} does not match ${join(dir, CERT_FILES.chain)}`);
  return { keyPem, chainPem, rootPem, notAfter: new Date(leaf.validTo) };
}
