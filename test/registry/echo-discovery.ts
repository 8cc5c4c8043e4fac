// A discovery server over a temp config dir holding the `echo` ServiceEntry and WorkloadGroup of
// namespace foo, with ADS clients for workloads that auto-register into it (autoregister.test.ts,
// workload-health.test.ts). Registering needs a verified identity: streams carry a token of the
// sample issuer, checked on the plaintext port (XDS_AUTH_PLAINTEXT) against TOKEN_ISSUER.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, Metadata } from '@grpc/grpc-js';
import { loadSettings } from '../../src/common/env.js';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import type { DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { sampleIssuer } from '../helpers/mesh-ca.js';
import { localDiscoveryOptions } from '../security/fixtures.js';
import { delta, sotw, type AdsClient, type DeltaStream, type SotwStream } from '../xds/harness.js';

export const ECHO = 'echo.foo.svc.cluster.local';
export const ECHO_CLUSTER = `outbound|80||${ECHO}`;

export function yaml(docs: string[]): string {
  return docs.join('\n---\n');
}

/** The next EDS response's endpoints (`ip:port`), ACKed. */
export async function nextEds(s: SotwStream): Promise<string[]> {
  const r: DiscoveryResponse = await s.next();
  assert.equal(r.typeUrl, TypeUrl.ClusterLoadAssignment);
  s.send({ typeUrl: r.typeUrl, versionInfo: r.versionInfo, responseNonce: r.nonce, resourceNames: [ECHO_CLUSTER] });
  const cla = unpack(r.resources[0]!, ClusterLoadAssignmentSchema);
  return cla.endpoints.flatMap((l) =>
    l.lbEndpoints.map((e) => {
      const sa = e.hostIdentifier.case === 'endpoint' ? e.hostIdentifier.value.address?.address : undefined;
      return sa?.case === 'socketAddress' ? `${sa.value.address}:${sa.value.portSpecifier.value}` : '?';
    }),
  );
}

export interface EchoDiscovery {
  server: DiscoveryServer;
  dir: string;
  client: () => AdsClient;
  /** Streams authenticated as service account `sa` of namespace foo (what their node claims). */
  sotwAs: (sa: string) => Promise<SotwStream>;
  deltaAs: (sa: string) => Promise<DeltaStream>;
}

/** Runs `run` against a started server; `settings` are discovery variables over the test's short grace and debounce. */
export async function withDiscovery(run: (ctx: EchoDiscovery) => Promise<void>, settings: Record<string, string> = {}): Promise<void> {
  const issuer = await sampleIssuer();
  loadSettings('discovery', { PILOT_WORKLOAD_ENTRY_GRACE_PERIOD: '100ms', PILOT_DEBOUNCE_AFTER: '10ms', XDS_AUTH_PLAINTEXT: 'true', TOKEN_ISSUER: issuer.url, ...settings });
  const dir = mkdtempSync(join(tmpdir(), 'mesh-autoreg-'));
  writeFileSync(
    join(dir, 'echo.yaml'),
    yaml([
      `apiVersion: networking.mesh.io/v1\nkind: ServiceEntry\nmetadata: {name: echo, namespace: foo}\nspec:\n  hosts: [${ECHO}]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  workloadSelector: {labels: {app: echo}}`,
      `apiVersion: networking.mesh.io/v1\nkind: WorkloadGroup\nmetadata: {name: echo, namespace: foo}\nspec:\n  template:\n    labels: {app: echo}\n    ports: {http: 8080}`,
    ]),
  );
  const server = new DiscoveryServer(localDiscoveryOptions(dir));
  const clients: AdsClient[] = [];
  const client = () => {
    const c = grpcClient(AggregatedDiscoveryService, server.addresses.grpc!, credentials.createInsecure()) as AdsClient;
    clients.push(c);
    return c;
  };
  const as = async (sa: string) => {
    const md = new Metadata();
    md.set('authorization', `Bearer ${await issuer.token('foo', sa)}`);
    return md;
  };
  try {
    await server.start();
    await run({ server, dir, client, sotwAs: async (sa) => sotw(client(), await as(sa)), deltaAs: async (sa) => delta(client(), await as(sa)) });
  } finally {
    for (const c of clients) c.close();
    await server.stop();
    issuer.server.close();
    loadSettings('discovery', {});
  }
}
