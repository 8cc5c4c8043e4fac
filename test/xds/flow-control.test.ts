// PILOT_ENABLE_FLOW_CONTROL on a real ADS stream: a client that has not yet answered its last
// response of a type is not sent another one of that type; pushes made meanwhile merge into one that
// goes out when the client ACKs or NACKs, or when PILOT_FLOW_CONTROL_TIMEOUT runs out.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import type { DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import type { XdsServerOptions } from '../../src/xds/server.js';
import { counterValue, delta, node, sotw, startServer, type Harness, type SotwStream } from './harness.js';

const CDS = TypeUrl.Cluster;
const LDS = TypeUrl.Listener;
const PROXY = 'sidecar~10.0.0.1~app-1.foo~foo.svc.cluster.local';

async function setup(t: { after(fn: () => void): void }, options: Partial<XdsServerOptions>): Promise<Harness> {
  const h = await startServer(options);
  t.after(() => h.close());
  h.fixtures.set(CDS, ClusterSchema, { name: 'c1', altStatName: 'v1' });
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1' });
  return h;
}

function altStatName(r: DiscoveryResponse): string {
  return unpack(r.resources[0]!, ClusterSchema).altStatName;
}

/** Nothing was sent since the last consumed response: a fresh LDS request is answered next. */
async function nothingPending(s: SotwStream): Promise<void> {
  s.send({ typeUrl: LDS });
  const r = await s.next();
  assert.equal(r.typeUrl, LDS, `a ${r.typeUrl} response was sent while the previous one was unanswered`);
  s.send({ typeUrl: LDS, versionInfo: r.versionInfo, responseNonce: r.nonce });
}

/** A config change of cluster c1 (its alt_stat_name tells versions apart), pushed to every stream. */
async function pushCluster(h: Harness, version: string): Promise<void> {
  h.fixtures.set(CDS, ClusterSchema, { name: 'c1', altStatName: version });
  await h.server.pushAll({ reason: 'config', types: new Set([CDS]) });
}

const held = () => counterValue('pilot_xds_delayed_pushes_total', { type: 'cds' });
const timedOut = () => counterValue('pilot_xds_delayed_push_timeouts_total', { type: 'cds' });

test('flow control on: pushes wait for the ACK of the previous response, then the latest config goes out once', async (t) => {
  const h = await setup(t, { flowControl: { enabled: true, timeoutMs: 600_000 } });
  const s = sotw(h.client());
  s.send({ node: node(PROXY), typeUrl: CDS });
  const first = await s.next();
  const heldBefore = await held();

  // The client keeps its ACK back; two config changes are pushed meanwhile.
  await pushCluster(h, 'v2');
  await pushCluster(h, 'v3');
  assert.equal(await held(), heldBefore + 2, 'both pushes were held');
  await nothingPending(s);

  s.send({ typeUrl: CDS, versionInfo: first.versionInfo, responseNonce: first.nonce });
  const next = await s.next();
  assert.equal(next.typeUrl, CDS);
  assert.equal(altStatName(next), 'v3', 'the held pushes went out as one, with the latest config');
  // Answered: the next push is sent at once.
  s.send({ typeUrl: CDS, versionInfo: next.versionInfo, responseNonce: next.nonce });
  await nothingPending(s);
  await pushCluster(h, 'v4');
  assert.equal(altStatName(await s.next()), 'v4');
  assert.equal(await held(), heldBefore + 2, 'a push after the ACK is not held');
});

test('flow control on: a NACK releases the held push too', async (t) => {
  const h = await setup(t, { flowControl: { enabled: true, timeoutMs: 600_000 } });
  const s = sotw(h.client());
  s.send({ node: node(PROXY), typeUrl: CDS });
  const first = await s.next();
  await pushCluster(h, 'v2');
  await nothingPending(s);
  s.send({ typeUrl: CDS, versionInfo: '', responseNonce: first.nonce, errorDetail: { code: 3, message: 'bad cluster' } });
  assert.equal(altStatName(await s.next()), 'v2');
});

test('flow control on: without a reply the held push goes out when PILOT_FLOW_CONTROL_TIMEOUT runs out, counted as a timeout', async (t) => {
  const h = await setup(t, { flowControl: { enabled: true, timeoutMs: 300 } });
  const s = sotw(h.client());
  s.send({ node: node(PROXY), typeUrl: CDS });
  await s.next();
  const timeoutsBefore = await timedOut();
  await pushCluster(h, 'v2');
  const late = await s.next();
  assert.equal(altStatName(late), 'v2', 'the held push was sent without an ACK');
  assert.equal(await timedOut(), timeoutsBefore + 1);
});

test('flow control on, Delta: a push waits for the reply to the previous delta response', async (t) => {
  const h = await setup(t, { flowControl: { enabled: true, timeoutMs: 600_000 } });
  const s = delta(h.client());
  s.send({ node: node(PROXY), typeUrl: CDS });
  const first = await s.next();
  const heldBefore = await held();
  await pushCluster(h, 'v2');
  assert.equal(await held(), heldBefore + 1);
  s.send({ typeUrl: CDS, responseNonce: first.nonce });
  const next = await s.next();
  assert.equal(unpack(next.resources[0]!.resource!, ClusterSchema).altStatName, 'v2');
});

test('flow control off (the default): a push is sent without waiting for the ACK', async (t) => {
  const h = await setup(t, {});
  const s = sotw(h.client());
  s.send({ node: node(PROXY), typeUrl: CDS });
  await s.next();
  const heldBefore = await held();
  await pushCluster(h, 'v2');
  assert.equal(altStatName(await s.next()), 'v2');
  assert.equal(await held(), heldBefore);
});
