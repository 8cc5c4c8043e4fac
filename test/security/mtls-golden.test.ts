// Mesh mTLS translation, one golden case per file in testdata/mtls/: the case's resources in (and a
// `kind: MtlsCase` document with the settings and the server workload), out: the server's inbound
// chains (name, match, transport socket, filter names) and listener filters, the client's outbound
// clusters with their transport sockets, and the load assignments with their tlsMode metadata.
import { test } from 'node:test';
import type { JsonValue } from '@bufbuild/protobuf';
import { validateResource } from '../../src/api/validate.js';
import type { AnyResource } from '../../src/api/types.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import { parseProxy, TLS_TRANSPORT_EXTENSION, type Proxy } from '../../src/model/proxy.js';
import { clusterLoadAssignments } from '../../src/xds/generators/sidecar-endpoints.js';
import { sidecarClusters, sidecarListeners } from '../../src/xds/generators/sidecar.js';
import type { MeshMtlsSettings } from '../../src/xds/generators/mtls.js';
import { goldenCases } from '../helpers/golden.js';
import { pushOf } from '../networking/fixtures.js';

interface MtlsCase {
  kind: 'MtlsCase';
  /** The workload whose inbound chains are shown. */
  server: { ip: string; namespace: string; labels: Record<string, string> };
  /** Whether the proxies have workload certificates (SDS) and announce the TLS transport socket; default true. */
  proxyMtls?: boolean;
  settings?: Partial<MeshMtlsSettings>;
  inboundSniffing?: boolean;
}

const DEFAULTS: MeshMtlsSettings = { trustDomain: 'cluster.local', aliases: [], skipValidation: false, autoMtls: true, inboundTlsV2: true };

function proxyOf(ip: string, pod: string, namespace: string, labels: Record<string, string>, mtls: boolean): Proxy {
  const meta = { NAMESPACE: namespace, LABELS: labels, ...(mtls ? { SDS: 'true' } : {}) };
  return parseProxy(`sidecar~${ip}~${pod}.${namespace}~${namespace}.svc.cluster.local`, meta, mtls ? [TLS_TRANSPORT_EXTENSION] : []);
}

type FilterJson = { name: string; typed_config: { cluster?: string; forward_client_cert_details?: string; set_current_client_cert_details?: JsonValue } };

/**
 * A chain as the golden shows it: a TCP proxy by its cluster, a connection manager by its client
 * certificate handling (their other fields have their own tests).
 */
function chainView(c: ReturnType<typeof toEnvoyJson>): JsonValue {
  const { filters, ...rest } = c as { filters?: FilterJson[] } & Record<string, JsonValue>;
  const view = (f: FilterJson): JsonValue =>
    f.typed_config.cluster !== undefined
      ? `${f.name} -> ${f.typed_config.cluster}`
      : { [f.name]: { forward_client_cert_details: f.typed_config.forward_client_cert_details ?? null, set_current_client_cert_details: f.typed_config.set_current_client_cert_details ?? null } };
  return { ...rest, filters: (filters ?? []).map(view) };
}

for (const c of goldenCases('test/security/testdata/mtls')) {
  test(`mtls golden: ${c.name}`, () => {
    const spec = c.documents.find((d) => (d as { kind?: string }).kind === 'MtlsCase') as MtlsCase;
    const resources: AnyResource[] = c.documents
      .filter((d) => d !== spec)
      .map((d, i) => {
        const r = validateResource(d);
        if (!r.ok) throw new Error(`${c.name}: document ${i} is invalid: ${r.issues.map((x) => x.message).join('; ')}`);
        return r.resource;
      });
    const push = pushOf(resources);
    const mtls: MeshMtlsSettings = { ...DEFAULTS, ...spec.settings };
    const withTls = spec.proxyMtls ?? true;
    const server = proxyOf(spec.server.ip, 'server', spec.server.namespace, spec.server.labels, withTls);
    const client = proxyOf('10.0.0.200', 'client', 'foo', { app: 'client' }, withTls);
    const inbound = sidecarListeners(server, push, { mtls, inboundSniffing: spec.inboundSniffing ?? false }).find((l) => l.name === 'virtualInbound')!;
    const out: JsonValue = {
      inbound: {
        listener_filters: inbound.listenerFilters.map((f) => f.name),
        filter_chains: inbound.filterChains.map((fc) => chainView(toEnvoyJson(FilterChainSchema, fc))),
      },
      clusters: sidecarClusters(client, push, false, undefined, mtls)
        .filter((cl) => cl.name.startsWith('outbound|'))
        .map((cl) => toEnvoyJson(ClusterSchema, cl)),
      endpoints: clusterLoadAssignments(client, push).map((e) => toEnvoyJson(ClusterLoadAssignmentSchema, e)),
    };
    c.check(out);
  });
}
