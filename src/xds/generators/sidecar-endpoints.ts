// A sidecar's EDS: the load assignments of its outbound clusters, indexed by cluster name once per
// (snapshot scope, selector key), and the endpoint inputs that CDS (clusters carrying endpoints) and
// the gateways' clusters share with it.
import type { ClusterLoadAssignment } from '../../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import { labelsMatch } from '../../model/selection.js';
import { EMPTY_LOCALITY, localityString, type ServiceInstance } from '../../model/service.js';
import { DEFAULT_LOCALITY_LB, effectiveLocalityLb, failoverApplies, failoverPriorities, type FailoverParty, type LocalityLbSetting } from '../../networking/locality-lb.js';
import { buildLoadAssignment, withDistributedWeights, type EndpointInput } from '../../networking/endpoint.js';
import { outboundClusterName } from '../../networking/names.js';
import { TLS_MODE_LABEL } from '../../networking/outbound-mtls.js';
import { clusterVariants, ruleTraffic } from '../../networking/traffic-policy.js';
import { cachedIn, memo, memoPair, type XdsCache } from '../cache.js';

/** A subset's instances: those carrying every one of its labels (all of them for the port's own cluster). */
export function subsetInstances(instances: readonly ServiceInstance[], labels: Readonly<Record<string, string>> | undefined): readonly ServiceInstance[] {
  return labels ? instances.filter((i) => labelsMatch(labels, i.labels)) : instances;
}

export function toEndpoints(instances: readonly ServiceInstance[]): EndpointInput[] {
  return instances.map((i) => ({ address: i.address, port: i.endpointPort, locality: i.locality, weight: i.weight, ...(i.labels[TLS_MODE_LABEL] ? { tlsMode: i.labels[TLS_MODE_LABEL] } : {}) }));
}

/**
 * Load assignments of the proxy's EDS clusters (`names`, or all of them). A name that is not an
 * outbound cluster of a STATIC service the proxy sees is left out (the server reports it as absent).
 * Proxies ask for every cluster by name on every push, so the scope's assignments are indexed by
 * cluster name once per snapshot and each name costs one lookup.
 */
export function clusterLoadAssignments(proxy: Proxy, push: PushContext, names?: ReadonlySet<string>, cache?: XdsCache, localityLb: LocalityLbSetting = DEFAULT_LOCALITY_LB): ClusterLoadAssignment[] {
  const scope = push.sidecarScope(proxy);
  const index = memo(scope, `eds:${push.traffic.selectorKey(proxy)}`, (): EdsIndex => {
    const shared = new Map<string, ClusterLoadAssignment>();
    const own = new Map<string, OwnAssignment>();
    for (const service of scope.services) {
      if (service.resolution !== 'STATIC') continue;
      const rule = ruleTraffic(push.traffic.destinationRule(proxy, service.hostname, service.namespace));
      for (const { port } of service.ports) {
        for (const v of clusterVariants(rule, port)) {
          const name = outboundClusterName(port, service.hostname, v.subset);
          // Shared by the scopes that see the same service (a subset's endpoints depend on its
          // labels), and kept with the port's instance list, which the next snapshot shares while
          // the instances are unchanged: a push then rebuilds (and fingerprints) only the changed
          // services' assignments. No instances: per snapshot.
          const instances = push.instances(service, port);
          const owner = instances.length > 0 ? instances : push;
          const key = `eds:${service.namespace}/${name}:${JSON.stringify(v.labels ?? {})}`;
          const setting = effectiveLocalityLb(localityLb, v.policy.loadBalancer?.localityLbSetting);
          const near = failoverApplies(setting, v.policy.outlierDetection) ? setting : undefined;
          const distribute = setting?.distribute?.length ? setting.distribute : undefined;
          const build = (client?: FailoverParty): ClusterLoadAssignment => {
            const members = subsetInstances(instances, v.labels);
            const endpoints = near && client ? prioritized(toEndpoints(members), members, client, near) : toEndpoints(members);
            const built = cachedIn(cache, () => ['eds', name, endpoints], () => buildLoadAssignment(name, endpoints));
            return distribute && client ? withDistributedWeights(built, client.locality, distribute) : built;
          };
          if (!near && !distribute) shared.set(name, memo(owner, key, () => build()));
          else own.set(name, (client, clientKey) => memo(owner, `${key}:${JSON.stringify(setting)}:${clientKey}`, () => build(client)));
        }
      }
    }
    return { shared, own };
  });
  if (index.own.size === 0) return subscribedAssignments(index.shared, names);
  // Locality failover and distribute make those clusters' assignments the client's own: its
  // locality (and labels) key them, the rest of the index is every client's.
  const client = failoverClient(proxy, push);
  const clientKey = JSON.stringify([localityString(client.locality), client.labels]);
  const byName = memo(index, clientKey, () => {
    const all = new Map(index.shared);
    for (const [name, assignment] of index.own) all.set(name, assignment(client, clientKey));
    return all;
  });
  return subscribedAssignments(byName, names);
}

/** A cluster whose assignment depends on the client (its locality and labels). */
type OwnAssignment = (client: FailoverParty, clientKey: string) => ClusterLoadAssignment;

/** A scope's assignments by cluster name: the same for every client, and those made per client. */
interface EdsIndex {
  readonly shared: ReadonlyMap<string, ClusterLoadAssignment>;
  readonly own: ReadonlyMap<string, OwnAssignment>;
}

/**
 * Who the client is to locality failover: its node's locality, else that of the instances its
 * workload serves (as the Go mesh, which takes an unset node locality from the workload's), and its labels.
 */
export function failoverClient(proxy: Proxy, push: PushContext): FailoverParty {
  const own = proxy.locality;
  const locality = own.region || own.zone || own.subZone ? own : (push.proxyInstances(proxy)[0]?.locality ?? EMPTY_LOCALITY);
  return { locality, labels: proxy.labels };
}

function prioritized(endpoints: EndpointInput[], members: readonly ServiceInstance[], client: FailoverParty, setting: LocalityLbSetting): EndpointInput[] {
  const priorities = failoverPriorities(client, members, setting);
  return endpoints.map((e, i) => (priorities[i] ? { ...e, priority: priorities[i] } : e));
}

/**
 * The assignments of `names` (all when undefined) from a scope's index, one list per (index, name
 * set): SotW streams asking for the same names share one set (subscriptions.ts), so the proxies of a
 * scope get one list, and the server filters and interns it once (ResourceSets.forSubscription).
 */
function subscribedAssignments(byName: ReadonlyMap<string, ClusterLoadAssignment>, names: ReadonlySet<string> | undefined): ClusterLoadAssignment[] {
  if (!names) return memo(byName, 'all', () => [...byName.values()]);
  return memoPair(byName, names, () => {
    const out: ClusterLoadAssignment[] = [];
    for (const n of names) {
      const cla = byName.get(n);
      if (cla) out.push(cla);
    }
    return out;
  });
}
