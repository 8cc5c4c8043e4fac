// The agent's lookup table, built from the discovery server's NameTable: every name an application
// may ask for a mesh host, with the A and AAAA records to answer. As the Go mesh's agent does:
// - a registry service (`shortname` set) is also known as `<short>.<ns>`, `<short>.<ns>.svc` and,
//   from a proxy of the same namespace, `<short>` (only within the proxy's own DNS domain);
// - a name with the first search domain appended (what the app's resolver asks first, e.g.
//   `api.example.com.foo.svc.cluster.local`) answers a CNAME to the name, so the search ends in one
//   round trip instead of going upstream once per search domain;
// - `*.example.com` hosts answer every name below them;
// - a known name without records of the asked type answers NOERROR with no records (not NXDOMAIN:
//   clients that ask A and AAAA together would give up on the name).
import { isIP } from 'node:net';
import type { Answer } from 'dns-packet';
import type { NameTable } from '../../gen/mesh/v1/dns_pb.js';

/** Low, so a client that caches answers soon sees a changed address. */
export const ANSWER_TTL_S = 30;

interface HostRecords {
  readonly v4: readonly string[];
  readonly v6: readonly string[];
}

export interface LookupContext {
  /** The proxy's namespace: short names of its own namespace resolve bare. */
  readonly namespace: string;
  /** The proxy's DNS domain, e.g. `foo.svc.cluster.local` (node.id's last part). */
  readonly domain: string;
  /** resolv.conf search domains. */
  readonly search: readonly string[];
}

function normalize(name: string): string {
  return name.replace(/\.$/, '').toLowerCase();
}

export class LookupTable {
  private readonly hosts = new Map<string, HostRecords>();
  /** Search-domain expansions -> the name they stand for. */
  private readonly aliases = new Map<string, string>();

  constructor(table: NameTable, ctx: LookupContext) {
    // `svc.cluster.local` from `foo.svc.cluster.local`: the part every service name ends with.
    const parts = normalize(ctx.domain).split('.');
    if (parts[0] === ctx.namespace) parts.shift();
    const serviceDomain = parts.join('.');
    const firstSearch = ctx.search[0] ? normalize(ctx.search[0]) : undefined;
    const expansions: string[] = [];
    for (const [hostname, info] of Object.entries(table.table)) {
      const records = { v4: info.ips.filter((ip) => isIP(ip) === 4), v6: info.ips.filter((ip) => isIP(ip) === 6) };
      if (records.v4.length + records.v6.length === 0) continue;
      const host = normalize(hostname);
      const names = [host];
      if (info.shortname && serviceDomain && host.endsWith(`.${serviceDomain}`)) {
        const short = info.shortname.toLowerCase();
        const ns = info.namespace.toLowerCase();
        names.push(`${short}.${ns}`, `${short}.${ns}.${parts[0]}`);
        if (ns === ctx.namespace.toLowerCase()) names.push(short);
      }
      for (const n of names) this.hosts.set(n, records);
      if (firstSearch) expansions.push(...names);
    }
    // Added last, so an expansion never hides a real host of that name.
    for (const n of expansions) {
      const alias = `${n}.${firstSearch}`;
      if (!this.hosts.has(alias)) this.aliases.set(alias, n);
    }
  }

  get size(): number {
    return this.hosts.size;
  }

  /**
   * The answer records for a question about a mesh name, or undefined when the name is not the
   * mesh's (or the type is not A/AAAA): the caller forwards those upstream.
   */
  lookup(qname: string, qtype: string): Answer[] | undefined {
    if (qtype !== 'A' && qtype !== 'AAAA') return undefined;
    const name = normalize(qname);
    const target = this.aliases.get(name);
    const host = target ?? name;
    let records = this.hosts.get(host);
    if (!records && !target) records = this.wildcard(host);
    if (!records) return undefined;
    const ips = qtype === 'A' ? records.v4 : records.v6;
    if (ips.length === 0) return [];
    const out: Answer[] = [];
    if (target) out.push({ name: qname, type: 'CNAME', class: 'IN', ttl: ANSWER_TTL_S, data: target });
    for (const ip of ips) out.push({ name: target ?? qname, type: qtype, class: 'IN', ttl: ANSWER_TTL_S, data: ip });
    return out;
  }

  private wildcard(name: string): HostRecords | undefined {
    const labels = name.split('.');
    for (let i = 1; i < labels.length; i++) {
      const r = this.hosts.get(`*.${labels.slice(i).join('.')}`);
      if (r) return r;
    }
    return undefined;
  }
}
