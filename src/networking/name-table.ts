// The DNS name table of one proxy (mesh.v1.dns.NameTable): every host the proxy sees with the
// addresses the proxy's listeners are bound to for it, so that what the agent answers and where the
// sidecar listens always agree. Pure: services in, message out.
import { isIP } from 'node:net';
import { create } from '@bufbuild/protobuf';
import { NameTableSchema, NameTable_NameInfoSchema, type NameTable, type NameTable_NameInfo } from '../gen/mesh/v1/dns_pb.js';
import type { Proxy } from '../model/proxy.js';
import { isHeadless, type Service, type ServiceInstance } from '../model/service.js';

/** The registry whose hosts are user-written names: never expanded to short names. */
const SERVICE_ENTRY_REGISTRY = 'ServiceEntry';

/** Whether the proxy is given auto-allocated addresses (the Go mesh's DNS_CAPTURE && DNS_AUTO_ALLOCATE). */
export function usesAutoAllocation(proxy: Pick<Proxy, 'dnsCapture' | 'dnsAutoAllocate'>): boolean {
  return proxy.dnsCapture && proxy.dnsAutoAllocate;
}

/**
 * The addresses the proxy uses for the service: its own when it has some (CIDRs left out: a name
 * resolves to hosts, not ranges), else the auto-allocated one when the proxy takes those, else none.
 */
export function serviceAddressesFor(service: Service, allocated: ReadonlyMap<string, string>, autoAllocate: boolean): string[] {
  if (service.addresses.length > 0) return service.addresses.filter((a) => isIP(a) !== 0);
  const a = autoAllocate ? allocated.get(service.hostname) : undefined;
  return a ? [a] : [];
}

/**
 * `<name>` of a service named `<name>.<namespace>.svc.<domain>` by a registry of services (not a
 * ServiceEntry, whose hosts are whatever the user wrote); undefined otherwise.
 */
export function shortNameOf(service: Service, domain: string): string | undefined {
  if (service.registry === SERVICE_ENTRY_REGISTRY) return undefined;
  const suffix = `.${service.namespace}.svc.${domain}`;
  if (!service.hostname.endsWith(suffix)) return undefined;
  const name = service.hostname.slice(0, -suffix.length);
  return name && !name.includes('.') ? name : undefined;
}

export interface NameTableInput {
  /** The services the proxy sees (its sidecar scope), in the snapshot's order. */
  readonly services: readonly Service[];
  /** The instances of a service (every port): a headless service's host resolves to theirs. */
  readonly instances: (service: Service) => readonly ServiceInstance[];
  /** hostname -> auto-allocated address (model/auto-allocate.ts). */
  readonly allocated: ReadonlyMap<string, string>;
  readonly autoAllocate: boolean;
  /** The mesh's DNS domain (`cluster.local`). */
  readonly domain: string;
  /** The proxy's cluster: its own cluster's Pod of a Pod name wins over another cluster's. */
  readonly clusterId: string;
}

/** A headless service's entries: its endpoints' addresses, and its Pods' own names (local cluster first). */
interface HeadlessEntries {
  readonly ips: string[];
  readonly pods: Map<string, NameTable_NameInfo>;
}

/**
 * What a headless service resolves to, as the Go mesh's name table and the orchestrator's own DNS:
 * the IP addresses of its instances (each once), and for each Pod that has a subdomain,
 * `<hostname>.<subdomain>.<the service host past its first label>` to the Pod's address, known by
 * the short name `<hostname>.<subdomain>` in the service's namespace. The instances are the ready
 * ones (the registries leave the others out). A Pod name of another cluster counts only where the
 * proxy's own cluster has no Pod of that name.
 */
function headlessEntries(s: Service, instances: readonly ServiceInstance[], clusterId: string): HeadlessEntries {
  const ips = new Set<string>();
  const local = new Map<string, string[]>();
  const remote = new Map<string, string[]>();
  const dot = s.hostname.indexOf('.');
  for (const i of instances) {
    if (isIP(i.address) === 0 || ips.has(i.address)) continue;
    ips.add(i.address);
    if (!i.podDns || dot < 0) continue;
    const short = `${i.podDns.hostname}.${i.podDns.subdomain}`;
    const into = i.clusterId === clusterId ? local : remote;
    into.set(short, [...(into.get(short) ?? []), i.address]);
  }
  const pods = new Map<string, NameTable_NameInfo>();
  for (const [short, addresses] of [...local, ...[...remote].filter(([short]) => !local.has(short))]) {
    pods.set(`${short}${s.hostname.slice(dot)}`, create(NameTable_NameInfoSchema, { ips: addresses, registry: s.registry, shortname: short, namespace: s.namespace }));
  }
  return { ips: [...ips], pods };
}

/**
 * One entry per host. A host declared more than once (several ServiceEntries, or a ServiceEntry
 * next to a registry service) merges its addresses; a registry service's entry wins over
 * ServiceEntries of the same host, as it carries the short-name information. A headless service's
 * Pod names are registry names too: they take the place of a ServiceEntry host of the same name.
 */
export function buildNameTable(input: NameTableInput): NameTable {
  const table: Record<string, NameTable_NameInfo> = {};
  for (const s of input.services) {
    let ips = serviceAddressesFor(s, input.allocated, input.autoAllocate);
    if (ips.length === 0 && isHeadless(s)) {
      const headless = headlessEntries(s, input.instances(s), input.clusterId);
      for (const [host, info] of headless.pods) table[host] = info;
      ips = headless.ips;
    }
    if (ips.length === 0) continue;
    const shortname = shortNameOf(s, input.domain);
    const info = create(NameTable_NameInfoSchema, { ips, registry: s.registry, ...(shortname ? { shortname, namespace: s.namespace } : {}) });
    const held = table[s.hostname];
    if (!held) table[s.hostname] = info;
    else if (held.registry === SERVICE_ENTRY_REGISTRY && s.registry !== SERVICE_ENTRY_REGISTRY) table[s.hostname] = info;
    else if (held.registry === s.registry) held.ips = [...new Set([...held.ips, ...ips])];
  }
  return create(NameTableSchema, { table });
}
