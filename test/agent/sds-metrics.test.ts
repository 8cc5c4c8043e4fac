// The SDS connection gauges on real SDS streams (SotW and Delta) over the agent's Unix socket:
// active connections go down when a stream ends; a connection is stale while its proxy holds an
// older certificate than the current one (a push not yet ACKed, or NACKed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import {
  DeltaDiscoveryRequestSchema,
  DiscoveryRequestSchema,
  type DeltaDiscoveryRequest,
  type DeltaDiscoveryResponse,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { SecretDiscoveryService } from '../../src/gen/envoy/service/secret/v3/sds_pb.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { counter, gauge } from '../../src/common/metrics.js';
import { meshCa, workload } from '../dataplane/tls-fixtures.js';
import { eventually } from '../helpers/proc.js';

interface SdsGrpc {
  streamSecrets(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  deltaSecrets(): ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>;
  close(): void;
}

const value = async (g: ReturnType<typeof gauge> | ReturnType<typeof counter>): Promise<number> => (await g.get()).values[0]?.value ?? 0;
const active = (): Promise<number> => value(gauge('total_active_connections'));
const stale = (): Promise<number> => value(gauge('total_stale_connections'));

function chainIn(resources: readonly (Any | { resource?: Any })[]): string | undefined {
  for (const item of resources) {
    const any = 'resource' in item ? item.resource : (item as Any);
    if (!any) continue;
    const s = unpack(any, SecretSchema);
    if (s.type.case === 'tlsCertificate') return Buffer.from(s.type.value.certificateChain!.specifier.value as Uint8Array).toString();
  }
  return undefined;
}

test('SDS gauges: active connections fall when streams end; stale connections are those whose proxy has not accepted the latest certificate', async (t) => {
  const ca = await meshCa();
  const w = await workload(t, ca, 'cart');
  const client = grpcClient(SecretDiscoveryService, `unix:${w.socket}`, credentials.createInsecure()) as unknown as SdsGrpc;
  t.after(() => client.close());
  const base = await active();

  const sotw: DiscoveryResponse[] = [];
  const a = client.streamSecrets();
  a.on('data', (r: DiscoveryResponse) => sotw.push(r));
  a.on('error', () => undefined);
  const names = ['default', 'ROOTCA'];
  const ackA = (r: DiscoveryResponse, error?: string): void => {
    a.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: names, versionInfo: r.versionInfo, responseNonce: r.nonce, ...(error ? { errorDetail: { code: 3, message: error } } : {}) }));
  };
  a.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: names }));
  ackA(await eventually(() => sotw[0] ?? assert.fail('no SotW response'), 10_000));

  const deltas: DeltaDiscoveryResponse[] = [];
  const b = client.deltaSecrets();
  b.on('data', (r: DeltaDiscoveryResponse) => deltas.push(r));
  b.on('error', () => undefined);
  const ackB = (r: DeltaDiscoveryResponse): void => void b.write(create(DeltaDiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, responseNonce: r.nonce }));
  b.write(create(DeltaDiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNamesSubscribe: names }));
  ackB(await eventually(() => deltas[0] ?? assert.fail('no Delta response'), 10_000));

  await eventually(async () => assert.equal(await active(), base + 2), 10_000);
  await eventually(async () => assert.equal(await stale(), 0), 10_000);

  // A new certificate is pushed on both streams; until their proxies ACK it, both are stale.
  const renewed = await w.renew();
  const latestA = await eventually(() => sotw.findLast((r) => chainIn(r.resources) === renewed) ?? assert.fail('no push of the new certificate on SotW'), 10_000);
  const latestB = await eventually(() => deltas.findLast((r) => chainIn(r.resources) === renewed) ?? assert.fail('no push of the new certificate on Delta'), 10_000);
  await eventually(async () => assert.equal(await stale(), 2), 10_000);

  // The SotW proxy rejects it (it keeps the old certificate), the Delta proxy accepts it.
  const nacks = await value(counter('total_secret_update_failures'));
  ackA(latestA, 'bad certificate');
  await eventually(async () => assert.equal(await value(counter('total_secret_update_failures')), nacks + 1), 10_000);
  ackB(latestB);
  await eventually(async () => assert.equal(await stale(), 1), 10_000);

  // The stale stream ends: neither counted as active nor stale any more.
  a.end();
  await eventually(async () => assert.equal(await active(), base + 1), 10_000);
  assert.equal(await stale(), 0);
  b.end();
  await eventually(async () => assert.equal(await active(), base), 10_000);
});
