// Fixture resources and snapshots shared by the model, registry and networking tests.
import type { AnyResource, ServiceEntrySpec, SidecarSpec, WorkloadEntrySpec, AuthorizationPolicySpec } from '../../src/api/types.js';
import { MemoryStore } from '../../src/config/memory.js';
import { validateResource } from '../../src/api/validate.js';
import { parseProxy, type Proxy } from '../../src/model/proxy.js';
import { PushContext, type PushContextOptions } from '../../src/model/push-context.js';
import { AggregateRegistry } from '../../src/registry/aggregate.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import type { ServiceRegistry } from '../../src/registry/types.js';

const NET = 'networking.mesh.io/v1';

export function serviceEntry(namespace: string, name: string, spec: ServiceEntrySpec): AnyResource {
  return { apiVersion: NET, kind: 'ServiceEntry', metadata: { namespace, name }, spec };
}

export function workloadEntry(namespace: string, name: string, spec: WorkloadEntrySpec): AnyResource {
  return { apiVersion: NET, kind: 'WorkloadEntry', metadata: { namespace, name }, spec };
}

export function sidecar(namespace: string, name: string, spec: SidecarSpec): AnyResource {
  return { apiVersion: NET, kind: 'Sidecar', metadata: { namespace, name }, spec };
}

export function authorizationPolicy(namespace: string, name: string, spec: AuthorizationPolicySpec): AnyResource {
  return { apiVersion: 'security.mesh.io/v1', kind: 'AuthorizationPolicy', metadata: { namespace, name }, spec };
}

export function storeOf(resources: readonly AnyResource[]): MemoryStore {
  const store = new MemoryStore();
  resources.forEach((r) => store.apply(r));
  store.markSynced();
  return store;
}

/** A snapshot of `resources` read through the ServiceEntry registry plus `extra` registries. */
export function pushOf(resources: readonly AnyResource[], extra: readonly ServiceRegistry[] = [], domain = 'cluster.local', traffic: PushContextOptions['traffic'] = {}): PushContext {
  const store = storeOf(resources);
  const registry = new AggregateRegistry([new ServiceEntryRegistry(store, 'c1'), ...extra]);
  return PushContext.build({ config: store, registry, domain, clusterId: 'c1', traffic });
}

export function sidecarProxy(ip: string, pod: string, namespace: string, meta: Record<string, string | Record<string, string>> = {}): Proxy {
  return parseProxy(`sidecar~${ip}~${pod}.${namespace}~${namespace}.svc.cluster.local`, { NAMESPACE: namespace, ...meta });
}

/**
 * The mesh of most tests: `echo` in `foo` (HTTP 80 -> 8080, gRPC 7070) with two WorkloadEntries
 * selected by label in two localities, a third WorkloadEntry in another namespace with the same
 * labels (must not be selected), a TCP `db` with a VIP, and an external DNS service.
 */
export const MESH: AnyResource[] = [
  serviceEntry('foo', 'echo', {
    hosts: ['echo.foo.svc.cluster.local'],
    addresses: ['10.96.0.10'],
    location: 'MESH_INTERNAL',
    resolution: 'STATIC',
    ports: [
      { number: 80, name: 'http', protocol: 'HTTP', targetPort: 8080 },
      { number: 7070, name: 'grpc', protocol: 'GRPC' },
    ],
    workloadSelector: { labels: { app: 'echo' } },
  }),
  workloadEntry('foo', 'echo-1', { address: '10.0.0.1', labels: { app: 'echo', version: 'v1' }, locality: 'us-east/zone-a/rack-1', weight: 3, serviceAccount: 'echo' }),
  workloadEntry('foo', 'echo-2', { address: '10.0.0.2', labels: { app: 'echo', version: 'v2' }, locality: 'us-west/zone-b', ports: { grpc: 17070 } }),
  workloadEntry('bar', 'echo-other-ns', { address: '10.0.0.99', labels: { app: 'echo' } }),
  serviceEntry('foo', 'db', {
    hosts: ['db.foo.svc.cluster.local'],
    addresses: ['10.96.0.20'],
    location: 'MESH_INTERNAL',
    resolution: 'STATIC',
    ports: [{ number: 5432, name: 'tcp-pg', protocol: 'TCP' }],
    endpoints: [{ address: '10.0.0.5' }],
  }),
  serviceEntry('bar', 'external', {
    hosts: ['api.example.com'],
    location: 'MESH_EXTERNAL',
    resolution: 'DNS',
    ports: [{ number: 443, name: 'tls', protocol: 'TLS' }],
  }),
];

/** A golden case's documents validated as a user's would be; an invalid one fails the case, naming it. */
export function validated(name: string, docs: readonly unknown[]): AnyResource[] {
  return docs.map((d, i) => {
    const r = validateResource(d);
    if (!r.ok) throw new Error(`${name}: document ${i} is invalid: ${r.issues.map((x) => x.message).join('; ')}`);
    return r.resource;
  });
}
