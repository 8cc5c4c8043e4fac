// SPIFFE federation inputs, pure: the SPIFFE_BUNDLE_ENDPOINTS setting and the SPIFFE bundle document
// (a JWK Set whose `use: x509-svid` keys carry the trust domain's X.509 roots in `x5c`).
import { X509Certificate } from 'node:crypto';

export interface BundleEndpoint {
  readonly trustDomain: string;
  readonly url: URL;
}

export interface SpiffeBundle {
  /** PEM of each X.509 root, in document order. */
  readonly rootsPem: readonly string[];
  /** `spiffe_refresh_hint`, seconds; undefined when absent. */
  readonly refreshHintS: number | undefined;
}

const TRUST_DOMAIN = /^[a-z0-9._-]+$/;

/** `<trust_domain>|<https url>` tuples joined by `||`; empty = none. Any bad tuple is an error naming it. */
export function parseBundleEndpoints(value: string): BundleEndpoint[] {
  if (value.trim() === '') return [];
  const seen = new Set<string>();
  return value.split('||').map((tuple) => {
    const bad = (why: string): Error => new Error(`SPIFFE_BUNDLE_ENDPOINTS: "${tuple}": ${why} (expected <trust_domain>|<endpoint_url>)`);
    const parts = tuple.split('|');
    if (parts.length !== 2) throw bad('not one trust domain and one URL separated by |');
    const [td, u] = [parts[0]!.trim(), parts[1]!.trim()];
    if (!TRUST_DOMAIN.test(td)) throw bad(`"${td}" is not a trust domain`);
    let url: URL;
    try {
      url = new URL(u);
    } catch {
      throw bad(`"${u}" is not a URL`);
    }
    // Roots fetched in clear could be replaced on the way: only HTTPS (the SPIFFE web PKI profile).
    if (url.protocol !== 'https:') throw bad(`"${u}" is not an https URL`);
    if (seen.has(td)) throw bad(`trust domain ${td} is given twice`);
    seen.add(td);
    return { trustDomain: td, url };
  });
}

/** Reads a SPIFFE bundle document; `where` names it in errors. A bundle without X.509 roots is an error. */
export function parseSpiffeBundle(text: string, where: string): SpiffeBundle {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new Error(`${where}: not JSON: ${(e as Error).message}`);
  }
  const obj = doc as { keys?: unknown; spiffe_refresh_hint?: unknown };
  if (typeof doc !== 'object' || doc === null || !Array.isArray(obj.keys)) throw new Error(`${where}: not a SPIFFE bundle (no "keys" array)`);
  const rootsPem: string[] = [];
  obj.keys.forEach((k: { use?: unknown; x5c?: unknown }, i) => {
    if (k?.use !== 'x509-svid') return;
    if (!Array.isArray(k.x5c) || k.x5c.length !== 1 || typeof k.x5c[0] !== 'string') throw new Error(`${where}: keys[${i}]: an x509-svid key needs exactly one x5c certificate`);
    try {
      rootsPem.push(new X509Certificate(Buffer.from(k.x5c[0], 'base64')).toString());
    } catch (e) {
      throw new Error(`${where}: keys[${i}].x5c[0]: ${(e as Error).message}`);
    }
  });
  if (rootsPem.length === 0) throw new Error(`${where}: no x509-svid key`);
  const hint = obj.spiffe_refresh_hint;
  if (hint !== undefined && (typeof hint !== 'number' || !(hint > 0))) throw new Error(`${where}: spiffe_refresh_hint ${JSON.stringify(hint)} is not a positive number of seconds`);
  return { rootsPem, refreshHintS: hint as number | undefined };
}
