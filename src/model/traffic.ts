// The networking API as the snapshot sees it: DestinationRules and VirtualServices indexed by the
// FQDN of their hosts, filtered by exportTo and selectors for one proxy. No I/O; the builders in
// networking/ turn what these return into Envoy messages.
import { compareByNamespacedName } from '../common/compare.js';
import type { DestinationRule, Subset, VirtualService } from '../api/types.js';
import type { Proxy } from './proxy.js';
import { hostMatches, labelsMatch } from './selection.js';
import { mergeDelegates } from './delegate.js';
import { inheritRule, isInheritable, namespaceDefaults } from './destination-rule-inheritance.js';

/** A DestinationRule merged for one host, as a proxy sees it. */
export interface EffectiveRule {
  /** The rule whose `trafficPolicy` applies (the first one, in namespace/name order). */
  readonly rule: DestinationRule;
  /** Subsets of every merged rule; the first definition of a name wins. */
  readonly subsets: readonly Subset[];
}

/** A VirtualService with its hosts resolved to FQDNs (short names in its own namespace). */
export interface ResolvedVirtualService {
  readonly vs: VirtualService;
  readonly hosts: readonly string[];
}

/** What the networking index reports about the config it read (counted into gauges by PushContext). */
export interface TrafficStats {
  /** Subset names defined twice for one host by merged DestinationRules. */
  readonly duplicateSubsets: number;
  /** Hosts claimed by more than one VirtualService bound to the mesh. */
  readonly duplicateDomains: readonly string[];
}

/** `reviews` in namespace `ns` is `reviews.ns.svc.<domain>`; names with a dot and `*` stay. */
export function resolveHost(host: string, ns: string, domain: string): string {
  if (host === '*' || host.includes('.')) return host;
  return `${host}.${ns}.svc.${domain}`;
}

/** Whether a resource of namespace `owner` with `exportTo` is visible from namespace `ns`. */
/** Whether a resource of namespace `owner` is visible from `ns`: its `exportTo`, else `fallback` (the mesh config's default; all namespaces unless set). */
export function exportedTo(exportTo: readonly string[] | undefined, owner: string, ns: string, fallback: readonly string[] = EXPORT_TO_ALL): boolean {
  const list = exportTo && exportTo.length > 0 ? exportTo : fallback;
  return list.some((e) => e === '*' || e === ns || (e === '.' && owner === ns));
}

export const EXPORT_TO_ALL: readonly string[] = ['*'];

/** The mesh config's defaultServiceExportTo, defaultVirtualServiceExportTo, defaultDestinationRuleExportTo: the exportTo of resources that set none. */
export interface ExportDefaults {
  readonly services?: readonly string[];
  readonly virtualServices?: readonly string[];
  readonly destinationRules?: readonly string[];
}

/** Whether a VirtualService applies to sidecars: no `gateways`, or `mesh` among them. */
export function boundToMesh(vs: VirtualService): boolean {
  const gws = vs.spec.gateways ?? [];
  return gws.length === 0 || gws.includes('mesh');
}

/** Settings of the networking API's semantics. */
export interface TrafficOptions {
  /** PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE (default true). */
  readonly virtualServiceDelegate?: boolean;
  /** PILOT_ENABLE_DESTINATION_RULE_INHERITANCE (default false). */
  readonly destinationRuleInheritance?: boolean;
  /** Reports problems found while indexing (a delegate not found, conflicting matches). */
  readonly warn?: (message: string) => void;
  /** The mesh config's exportTo defaults of VirtualServices and DestinationRules. */
  readonly exportDefaults?: ExportDefaults;
}

export class TrafficIndex {
  readonly stats: TrafficStats;
  private readonly rules: readonly DestinationRule[];
  private readonly services: readonly ResolvedVirtualService[];
  private readonly exports: ExportDefaults;
  /** With inheritance on: each namespace's host-less rule, merged over the mesh's. */
  private readonly defaults?: ReadonlyMap<string, DestinationRule>;

  constructor(
    rules: readonly DestinationRule[],
    virtualServices: readonly VirtualService[],
    private readonly domain: string,
    private readonly rootNamespace: string,
    opts: TrafficOptions = {},
  ) {
    this.rules = [...rules].sort(compareByNamespacedName);
    if (opts.destinationRuleInheritance) this.defaults = namespaceDefaults(this.rules, rootNamespace, opts.warn ?? (() => undefined));
    this.exports = opts.exportDefaults ?? {};
    const delegation = { enabled: opts.virtualServiceDelegate ?? true, domain, warn: opts.warn ?? (() => undefined), ...(this.exports.virtualServices ? { exportTo: this.exports.virtualServices } : {}) };
    this.services = mergeDelegates(virtualServices, delegation)
      .filter(boundToMesh)
      .sort(compareByNamespacedName)
      .map((vs) => ({ vs, hosts: (vs.spec.hosts ?? []).map((h) => resolveHost(h, vs.metadata.namespace, domain)) }));
    this.stats = { duplicateSubsets: this.countDuplicateSubsets(), duplicateDomains: this.duplicateDomains() };
  }

  /**
   * The DestinationRule for `hostname` seen by `proxy`, searched as the Go mesh does: the proxy's
   * namespace (rules whose workloadSelector selects it before selector-less ones), then the
   * service's namespace, then the root namespace; within the first namespace that has any, the
   * rules for the same host are merged (first trafficPolicy, union of subsets). With inheritance,
   * the rule found inherits its namespace's defaults (else the mesh's); without one, the proxy's
   * namespace defaults (else the mesh's) apply on their own.
   */
  /**
   * `inbound`: for the proxy's own inbound clusters, where the Go mesh honours no workloadSelector
   * (the Sidecar's inbound settings are the workload-specific way): rules without one only.
   */
  destinationRule(proxy: Proxy, hostname: string, serviceNamespace: string, inbound = false): EffectiveRule | undefined {
    const found = this.hostRule(proxy, hostname, serviceNamespace, inbound);
    if (!this.defaults) return found;
    const nsDefaults = (ns: string) => this.defaults!.get(ns) ?? this.defaults!.get(this.rootNamespace);
    if (found) return { ...found, rule: inheritRule(nsDefaults(found.rule.metadata.namespace), found.rule)! };
    const fallback = nsDefaults(proxy.namespace);
    return fallback ? { rule: fallback, subsets: [] } : undefined;
  }

  private hostRule(proxy: Proxy, hostname: string, serviceNamespace: string, inbound: boolean): EffectiveRule | undefined {
    const forHost = this.rules.filter((r) => !isInheritable(r) && hostMatches(resolveHost(r.spec.host ?? '', r.metadata.namespace, this.domain), hostname));
    for (const ns of [proxy.namespace, serviceNamespace, this.rootNamespace]) {
      const inNs = forHost.filter((r) => r.metadata.namespace === ns && exportedTo(r.spec.exportTo, ns, proxy.namespace, this.exports.destinationRules));
      const selecting = inNs.filter((r) => !inbound && r.spec.workloadSelector?.labels && ns === proxy.namespace && labelsMatch(r.spec.workloadSelector.labels, proxy.labels));
      const plain = inNs.filter((r) => !r.spec.workloadSelector?.labels);
      const chosen = selecting.length > 0 ? selecting.slice(0, 1) : plain;
      if (chosen.length > 0) return merge(chosen);
    }
    return undefined;
  }

  /**
   * What makes DestinationRule selection differ between proxies of one namespace: the rules of
   * that namespace whose workloadSelector selects the proxy. Part of the keys of per-scope memos.
   */
  selectorKey(proxy: Proxy): string {
    return this.rules
      .filter((r) => r.metadata.namespace === proxy.namespace && r.spec.workloadSelector?.labels && labelsMatch(r.spec.workloadSelector.labels, proxy.labels))
      .map((r) => r.metadata.name)
      .join(',');
  }

  /** The proxy's labels when a VirtualService it sees matches on `sourceLabels`, else ''. Part of route memo keys. */
  sourceLabelsKey(proxy: Proxy): string {
    const routes = ({ vs }: ResolvedVirtualService) => [...(vs.spec.http ?? []), ...(vs.spec.tcp ?? []), ...(vs.spec.tls ?? [])] as { match?: unknown[] }[];
    const uses = this.virtualServicesFor(proxy.namespace).some((v) => routes(v).some((r) => (r.match ?? []).some((m) => (m as Record<string, unknown>)['sourceLabels'] !== undefined)));
    return uses ? JSON.stringify(Object.entries(proxy.labels).sort()) : '';
  }

  /** VirtualServices visible from namespace `ns`, each with the hosts it claims first (see stats). */
  virtualServicesFor(ns: string): readonly ResolvedVirtualService[] {
    return this.services.filter((r) => exportedTo(r.vs.spec.exportTo, r.vs.metadata.namespace, ns, this.exports.virtualServices));
  }

  private countDuplicateSubsets(): number {
    let dups = 0;
    const byHost = new Map<string, Set<string>>();
    for (const r of this.rules) {
      const key = `${r.metadata.namespace}/${resolveHost(r.spec.host ?? '', r.metadata.namespace, this.domain)}`;
      const seen = byHost.get(key) ?? new Set<string>();
      byHost.set(key, seen);
      for (const s of r.spec.subsets ?? []) {
        if (seen.has(s.name)) dups++;
        seen.add(s.name);
      }
    }
    return dups;
  }

  private duplicateDomains(): string[] {
    const owner = new Map<string, string>();
    const dups = new Set<string>();
    for (const { vs, hosts } of this.services) {
      for (const h of hosts) {
        const prev = owner.get(h);
        if (prev && prev !== `${vs.metadata.namespace}/${vs.metadata.name}`) dups.add(h);
        else owner.set(h, `${vs.metadata.namespace}/${vs.metadata.name}`);
      }
    }
    return [...dups].sort();
  }
}

function merge(rules: readonly DestinationRule[]): EffectiveRule {
  const subsets = new Map<string, Subset>();
  for (const r of rules) for (const s of r.spec.subsets ?? []) if (!subsets.has(s.name)) subsets.set(s.name, s);
  return { rule: rules[0]!, subsets: [...subsets.values()] };
}
