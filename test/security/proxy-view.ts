// A proxy as the tests of policies at the discovery server see it: a real ADS stream (the client
// our agent uses) and the inbound HTTP filters it holds now.
import assert from 'node:assert/strict';
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { METADATA_EXCHANGE_FILTER_NAME, STATS_FILTER_NAME } from '../../src/envoy/names.js';

const TELEMETRY_FILTERS: ReadonlySet<string> = new Set([METADATA_EXCHANGE_FILTER_NAME, STATS_FILTER_NAME]);

/** A second workload beside the sample httpbin: `other` on 127.0.0.2, inbound port 15081. */
export const OTHER_WORKLOAD = `apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: { name: other-1, namespace: default }
spec: { address: 127.0.0.2, ports: { http: 8001 }, labels: { app: other }, serviceAccount: other }
---
apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: { name: other, namespace: default }
spec:
  hosts: ["other.default.svc.cluster.local"]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{ number: 8001, name: http, protocol: HTTP }]
  workloadSelector: { labels: { app: other } }
---
apiVersion: networking.mesh.io/v1
kind: Sidecar
metadata: { name: other, namespace: default }
spec:
  workloadSelector: { labels: { app: other } }
  ingress: [{ port: { number: 15081, protocol: HTTP, name: http }, defaultEndpoint: 127.0.0.1:8001, captureMode: NONE }]
`;

/** The sample httpbin (samples/config/workloads.yaml, port 15080) or `other` (OTHER_WORKLOAD, port 15081). */
export function proxy(address: string, app: string, port: number) {
  const ads = new AdsClient({
    address,
    node: { id: `sidecar~127.0.0.${port === 15080 ? 1 : 2}~${app}-1.default~default.svc.cluster.local`, metadata: { NAMESPACE: 'default', LABELS: { app }, INTERCEPTION_MODE: 'NONE', SERVICE_ACCOUNT: app } },
    onUpdate: () => undefined,
  });
  ads.start();
  /** The inbound HTTP filters on the Sidecar ingress port, as the proxy holds them now, but the telemetry ones every connection manager has. */
  const filters = () => {
    const listener = [...ads.resources(TypeUrl.Listener).values()]
      .map((r) => r.message as Listener)
      .find((l) => l.address?.address.case === 'socketAddress' && l.address.address.value.portSpecifier.value === port);
    assert.ok(listener, `an inbound listener on ${port}`);
    const hcm = listener.filterChains[0]!.filters[0]!.configType;
    assert.equal(hcm.case, 'typedConfig');
    return unpack(hcm.value!, HttpConnectionManagerSchema).httpFilters.filter((f) => !TELEMETRY_FILTERS.has(f.name));
  };
  /** The key set of the jwt_authn provider, or undefined when there is no jwt_authn filter. */
  const keys = () => {
    const jwt = filters().find((f) => f.name === 'envoy.filters.http.jwt_authn');
    if (!jwt) return undefined;
    const provider = Object.values(unpack(jwt.configType.value as never, JwtAuthenticationSchema).providers)[0]!;
    return provider.jwksSourceSpecifier.case === 'localJwks' ? String(provider.jwksSourceSpecifier.value.specifier.value) : undefined;
  };
  return { ads, filters, keys };
}

