// Filter chain selection for a new connection, with Envoy's semantics: the criteria are tried in a
// fixed order (destination port, destination IP, server name, transport protocol, application
// protocols, direct source IP, source type, source IP, source port). At each level the chains that
// match the connection most specifically survive; only if none does, the chains that leave that
// criterion empty do. There is no backtracking: a connection that narrows to nothing gets the
// default filter chain (or is closed).
import { isIP } from 'node:net';
import { FilterChainMatch_ConnectionSourceType, type FilterChainMatch } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { ConfigError } from '../envoy/config-error.js';
import { compileCidr, normalizeIp } from '../envoy/matchers.js';

/** What is known about a connection when its chain is chosen. */
export interface ConnectionFacts {
  readonly destinationIp: string;
  readonly destinationPort: number;
  readonly sourceIp: string;
  readonly sourcePort: number;
  /** SNI; empty without TLS inspection. */
  readonly serverName: string;
  /** `raw_buffer` unless a listener filter detected `tls`. */
  readonly transportProtocol: string;
  /** From http_inspector (`http/1.1`, `h2c`) or ALPN; empty when not inspected. */
  readonly applicationProtocols: readonly string[];
}

interface Cidr {
  readonly len: number;
  readonly test: (ip: string) => boolean;
}

export interface CompiledChainMatch {
  readonly destinationPort?: number;
  readonly prefixRanges: readonly Cidr[];
  readonly serverNames: readonly string[];
  readonly transportProtocol: string;
  readonly applicationProtocols: readonly string[];
  readonly directSourcePrefixRanges: readonly Cidr[];
  readonly sourceType: FilterChainMatch_ConnectionSourceType;
  readonly sourcePrefixRanges: readonly Cidr[];
  readonly sourcePorts: readonly number[];
  /** A canonical text of the criteria, to refuse two chains that match the same connections. */
  readonly key: string;
}

function cidrs(list: FilterChainMatch['prefixRanges'], field: string): Cidr[] {
  return list.map((c, i) => ({ len: c.prefixLen ?? 0, test: compileCidr(c, `${field}[${i}]`) }));
}

export function compileChainMatch(m: FilterChainMatch | undefined, field: string): CompiledChainMatch {
  if (m?.addressSuffix || m?.suffixLen !== undefined) throw new ConfigError(`${field}.address_suffix`, 'address_suffix and suffix_len are not supported');
  const out = {
    ...(m?.destinationPort !== undefined ? { destinationPort: m.destinationPort } : {}),
    prefixRanges: cidrs(m?.prefixRanges ?? [], `${field}.prefix_ranges`),
    serverNames: (m?.serverNames ?? []).map((s) => s.toLowerCase()),
    transportProtocol: m?.transportProtocol ?? '',
    applicationProtocols: m?.applicationProtocols ?? [],
    directSourcePrefixRanges: cidrs(m?.directSourcePrefixRanges ?? [], `${field}.direct_source_prefix_ranges`),
    sourceType: m?.sourceType ?? FilterChainMatch_ConnectionSourceType.ANY,
    sourcePrefixRanges: cidrs(m?.sourcePrefixRanges ?? [], `${field}.source_prefix_ranges`),
    sourcePorts: m?.sourcePorts ?? [],
  };
  const ranges = (l: FilterChainMatch['prefixRanges'] | undefined) => (l ?? []).map((c) => `${normalizeIp(c.addressPrefix)}/${c.prefixLen ?? 0}`).sort();
  const key = JSON.stringify([
    out.destinationPort ?? null,
    ranges(m?.prefixRanges),
    [...out.serverNames].sort(),
    out.transportProtocol,
    [...out.applicationProtocols].sort(),
    ranges(m?.directSourcePrefixRanges),
    out.sourceType,
    ranges(m?.sourcePrefixRanges),
    [...out.sourcePorts].sort(),
  ]);
  return { ...out, key };
}

/** Narrows to the specific matches of one level (best score), else to those leaving it empty. */
function level<T extends { match: CompiledChainMatch }>(chains: T[], isEmpty: (m: CompiledChainMatch) => boolean, score: (m: CompiledChainMatch) => number): T[] {
  let best = -1;
  let specific: T[] = [];
  for (const c of chains) {
    if (isEmpty(c.match)) continue;
    const s = score(c.match);
    if (s < 0) continue;
    if (s > best) {
      best = s;
      specific = [c];
    } else if (s === best) specific.push(c);
  }
  return specific.length > 0 ? specific : chains.filter((c) => isEmpty(c.match));
}

/** The longest matching prefix length, or -1. */
function longestPrefix(ranges: readonly Cidr[], ip: string): number {
  let best = -1;
  for (const r of ranges) if (r.len > best && r.test(ip)) best = r.len;
  return best;
}

/** Exact server name beats the longest `*.suffix` wildcard. */
function serverNameScore(names: readonly string[], sni: string): number {
  if (!sni) return -1;
  let best = -1;
  for (const n of names) {
    if (n === sni) return Number.MAX_SAFE_INTEGER;
    if (n.startsWith('*.') && sni.endsWith(n.slice(1)) && n.length > best) best = n.length;
  }
  return best;
}

function isLocal(f: ConnectionFacts): boolean {
  const src = normalizeIp(f.sourceIp);
  if (src === normalizeIp(f.destinationIp)) return true;
  return isIP(src) === 4 ? src.startsWith('127.') : src === '::1';
}

/** The chain for a connection, or undefined (then the listener's default chain applies). */
export function selectChain<T extends { match: CompiledChainMatch }>(chains: readonly T[], f: ConnectionFacts): T | undefined {
  let c = [...chains];
  c = level(c, (m) => m.destinationPort === undefined, (m) => (m.destinationPort === f.destinationPort ? 0 : -1));
  c = level(c, (m) => m.prefixRanges.length === 0, (m) => longestPrefix(m.prefixRanges, f.destinationIp));
  c = level(c, (m) => m.serverNames.length === 0, (m) => serverNameScore(m.serverNames, f.serverName.toLowerCase()));
  c = level(c, (m) => m.transportProtocol === '', (m) => (m.transportProtocol === f.transportProtocol ? 0 : -1));
  c = level(c, (m) => m.applicationProtocols.length === 0, (m) => (m.applicationProtocols.some((p) => f.applicationProtocols.includes(p)) ? 0 : -1));
  c = level(c, (m) => m.directSourcePrefixRanges.length === 0, (m) => longestPrefix(m.directSourcePrefixRanges, f.sourceIp));
  const local = isLocal(f);
  c = level(
    c,
    (m) => m.sourceType === FilterChainMatch_ConnectionSourceType.ANY,
    (m) => ((m.sourceType === FilterChainMatch_ConnectionSourceType.SAME_IP_OR_LOOPBACK) === local ? 0 : -1),
  );
  c = level(c, (m) => m.sourcePrefixRanges.length === 0, (m) => longestPrefix(m.sourcePrefixRanges, f.sourceIp));
  c = level(c, (m) => m.sourcePorts.length === 0, (m) => (m.sourcePorts.includes(f.sourcePort) ? 0 : -1));
  return c[0];
}
