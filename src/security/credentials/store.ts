// The credentials gateways name with `credentialName`: a certificate with its key and/or a CA
// bundle, held per namespace and name. Sources (the orchestrator's Secrets, or a local directory
// tree) write into the store; the SDS generator reads it and is told what changed, so a rotated
// Secret reaches the proxies that watch it.

/** One credential, PEM bytes as the Secret holds them. */
export interface Credential {
  readonly certificateChain?: Buffer;
  readonly privateKey?: Buffer;
  readonly caCertificate?: Buffer;
  /** The CA's revocation list (PEM), served with the CA. */
  readonly crl?: Buffer;
}

export interface CredentialChange {
  readonly namespace: string;
  readonly name: string;
}

/** The keys of a Secret's data, as the Go mesh reads them: the TLS Secret's, then the generic ones. */
const CERT_KEYS = ['tls.crt', 'cert'];
const KEY_KEYS = ['tls.key', 'key'];
const CA_KEYS = ['ca.crt', 'cacert'];
const CRL_KEYS = ['ca.crl', 'crl'];

function first(data: ReadonlyMap<string, Buffer>, keys: readonly string[]): Buffer | undefined {
  for (const k of keys) {
    const v = data.get(k);
    if (v && v.length > 0) return v;
  }
  return undefined;
}

/** A credential from a Secret's data (decoded); undefined when it holds none of the known keys. */
export function credentialOf(data: ReadonlyMap<string, Buffer>): Credential | undefined {
  const certificateChain = first(data, CERT_KEYS);
  const privateKey = first(data, KEY_KEYS);
  const caCertificate = first(data, CA_KEYS);
  const crl = first(data, CRL_KEYS);
  if (!certificateChain && !privateKey && !caCertificate) return undefined;
  return { ...(certificateChain ? { certificateChain } : {}), ...(privateKey ? { privateKey } : {}), ...(caCertificate ? { caCertificate } : {}), ...(crl ? { crl } : {}) };
}

function same(a: Credential | undefined, b: Credential | undefined): boolean {
  const eq = (x: Buffer | undefined, y: Buffer | undefined) => (x === undefined ? y === undefined : y !== undefined && x.equals(y));
  if (!a || !b) return a === b;
  return eq(a.certificateChain, b.certificateChain) && eq(a.privateKey, b.privateKey) && eq(a.caCertificate, b.caCertificate) && eq(a.crl, b.crl);
}

export class CredentialStore {
  private readonly byKey = new Map<string, Credential>();
  private readonly handlers = new Set<(c: CredentialChange) => void>();

  get(namespace: string, name: string): Credential | undefined {
    return this.byKey.get(`${namespace}/${name}`);
  }

  /** Sets (or, with undefined, removes) a credential; handlers hear of real changes only. */
  set(namespace: string, name: string, credential: Credential | undefined): void {
    const key = `${namespace}/${name}`;
    if (same(this.byKey.get(key), credential)) return;
    if (credential) this.byKey.set(key, credential);
    else this.byKey.delete(key);
    for (const h of [...this.handlers]) h({ namespace, name });
  }

  /** Every held key `namespace/name`, for sources that reconcile a full listing. */
  keys(): string[] {
    return [...this.byKey.keys()];
  }

  onChange(handler: (c: CredentialChange) => void): () => void {
    this.handlers.add(handler);
    return () => this.handlers.delete(handler);
  }
}
