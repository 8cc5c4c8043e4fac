import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { DeltaDiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { counterValue, delta, node, startServer, type DeltaStream, type Harness } from './harness.js';

const PROXY = 'sidecar~10.0.0.2~app-2.foo~foo.svc.cluster.local';
const CDS = TypeUrl.Cluster;
const EDS = TypeUrl.ClusterLoadAssignment;
const LDS = TypeUrl.Listener;

async function setup(t: { after(fn: () => void): void }): Promise<Harness> {
  const h = await startServer();
  t.after(() => h.close());
  h.fixtures.set(CDS, ClusterSchema, { name: 'c1' });
  h.fixtures.set(CDS, ClusterSchema, { name: 'c2' });
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1' });
  h.fixtures.setNamed(EDS, 'c1', ClusterLoadAssignmentSchema, { clusterName: 'c1' });
  h.fixtures.setNamed(EDS, 'c2', ClusterLoadAssignmentSchema, { clusterName: 'c2' });
  return h;
}

function names(r: DeltaDiscoveryResponse): string[] {
  return r.resources.map((x) => x.name).sort();
}

function versions(r: DeltaDiscoveryResponse): Record<string, string> {
  return Object.fromEntries(r.resources.map((x) => [x.name, x.version]));
}

function ack(d: DeltaStream, r: DeltaDiscoveryResponse): void {
  d.send({ typeUrl: r.typeUrl, responseNonce: r.nonce });
}

let probe = 0;
/**
 * Proves nothing was sent since the last consumed response: subscribing to a name that does not
 * exist is always answered (as removed), and the stream is ordered, so that answer comes next.
 */
async function roundTrip(d: DeltaStream): Promise<void> {
  const name = `probe-${++probe}`;
  d.send({ typeUrl: EDS, resourceNamesSubscribe: [name] });
  const r = await d.next();
  assert.equal(r.typeUrl, EDS, `expected only the probe answer, got a ${r.typeUrl} response first`);
  assert.deepEqual(r.removedResources, [name]);
  assert.deepEqual(r.resources, []);
}

function watch(h: Harness, typeUrl: string) {
  return h.server.connections().find((c) => c.proxyId === PROXY && c.protocol === 'delta')?.watches.find((w) => w.typeUrl === typeUrl);
}

test('Delta: wildcard CDS, ACK, then pushes send only changed and removed resources', async (t) => {
  const h = await setup(t);
  const d = delta(h.client());
  d.send({ node: node(PROXY), typeUrl: CDS });
  const r1 = await d.next();
  assert.deepEqual(names(r1), ['c1', 'c2']);
  assert.deepEqual(r1.removedResources, []);
  assert.notEqual(r1.systemVersionInfo, '');
  assert.equal(unpack(r1.resources[0]!.resource!, ClusterSchema).name, r1.resources[0]!.name);
  ack(d, r1);
  await roundTrip(d);
  assert.equal(watch(h, CDS)?.state, 'SYNCED');
  assert.equal(watch(h, CDS)?.wildcard, true);

  await h.server.pushAll({ reason: 'none changed' });
  await roundTrip(d);

  h.fixtures.set(CDS, ClusterSchema, { name: 'c1', altStatName: 'v2' });
  await h.server.pushAll({ reason: 'config', types: new Set([CDS]) });
  const r2 = await d.next();
  assert.deepEqual(names(r2), ['c1']);
  assert.notEqual(versions(r2)['c1'], versions(r1)['c1']);
  assert.notEqual(r2.systemVersionInfo, r1.systemVersionInfo);
  ack(d, r2);

  h.fixtures.delete(CDS, 'c2');
  h.fixtures.set(CDS, ClusterSchema, { name: 'c3' });
  await h.server.pushAll({ reason: 'config', types: new Set([CDS]) });
  const r3 = await d.next();
  assert.deepEqual(names(r3), ['c3']);
  assert.deepEqual(r3.removedResources, ['c2']);
  ack(d, r3);
  await roundTrip(d);
  const w = watch(h, CDS);
  assert.equal(w?.state, 'SYNCED');
  assert.deepEqual(w?.acked?.resourceNames.sort(), ['c1', 'c3']);
});

test('Delta: initial_resource_versions skip what the proxy has and remove what is gone', async (t) => {
  const h = await setup(t);
  const first = delta(h.client());
  first.send({ node: node('other~proxy'), typeUrl: CDS });
  const known = versions(await first.next());

  const d = delta(h.client());
  d.send({ node: node(PROXY), typeUrl: CDS, initialResourceVersions: { c1: known['c1']!, c2: 'outdated', gone: 'v0' } });
  const r = await d.next();
  assert.deepEqual(names(r), ['c2']);
  assert.deepEqual(r.removedResources, ['gone']);
});

test('Delta: named EDS subscribe and unsubscribe; a missing name is answered as removed', async (t) => {
  const h = await setup(t);
  const d = delta(h.client());
  d.send({ node: node(PROXY), typeUrl: EDS, resourceNamesSubscribe: ['c1'] });
  const r1 = await d.next();
  assert.deepEqual(names(r1), ['c1']);
  assert.equal(watch(h, EDS)?.wildcard, false);
  ack(d, r1);

  d.send({ typeUrl: EDS, responseNonce: r1.nonce, resourceNamesSubscribe: ['c2', 'nope'] });
  const r2 = await d.next();
  assert.deepEqual(names(r2), ['c2']);
  assert.deepEqual(r2.removedResources, ['nope']);
  ack(d, r2);

  // Unsubscribing is not answered, and the resource is no longer pushed.
  d.send({ typeUrl: EDS, resourceNamesUnsubscribe: ['c1'] });
  await roundTrip(d);
  assert.deepEqual(watch(h, EDS)?.names.filter((n) => !n.startsWith('probe')).sort(), ['c2', 'nope']);
  h.fixtures.setNamed(EDS, 'c1', ClusterLoadAssignmentSchema, { clusterName: 'c1', endpoints: [{ loadBalancingWeight: 2 }] });
  await h.server.pushAll({ reason: 'endpoint', types: new Set([EDS]) });
  await roundTrip(d);

  h.fixtures.setNamed(EDS, 'c2', ClusterLoadAssignmentSchema, { clusterName: 'c2', endpoints: [{ loadBalancingWeight: 3 }] });
  h.fixtures.setNamed(EDS, 'nope', ClusterLoadAssignmentSchema, { clusterName: 'nope' });
  await h.server.pushAll({ reason: 'endpoint', types: new Set([EDS]) });
  const r3 = await d.next();
  assert.deepEqual(names(r3), ['c2', 'nope']);
  const cla = unpack(r3.resources.find((x) => x.name === 'c2')!.resource!, ClusterLoadAssignmentSchema);
  assert.equal(cla.endpoints[0]?.loadBalancingWeight?.valueOf(), 3);
});

test('Delta: explicit "*" subscribes to everything; unsubscribing "*" keeps only named resources', async (t) => {
  const h = await setup(t);
  h.fixtures.set(LDS, ListenerSchema, { name: 'l2' });
  const d = delta(h.client());
  d.send({ node: node(PROXY), typeUrl: LDS, resourceNamesSubscribe: ['l1'] });
  const r1 = await d.next();
  assert.deepEqual(names(r1), ['l1']);
  d.send({ typeUrl: LDS, responseNonce: r1.nonce, resourceNamesSubscribe: ['*'] });
  const r2 = await d.next();
  assert.deepEqual(names(r2), ['l2']);
  assert.equal(watch(h, LDS)?.wildcard, true);
  ack(d, r2);
  d.send({ typeUrl: LDS, resourceNamesUnsubscribe: ['*'] });
  await roundTrip(d);
  h.fixtures.set(LDS, ListenerSchema, { name: 'l2', statPrefix: 'changed' });
  await h.server.pushAll({ reason: 'config' });
  await roundTrip(d);
  assert.equal(watch(h, LDS)?.wildcard, false);
});

test('Delta: NACK keeps the acked state and is counted; an unknown nonce is expired', async (t) => {
  const h = await setup(t);
  const d = delta(h.client());
  d.send({ node: node(PROXY), typeUrl: CDS });
  const r1 = await d.next();
  ack(d, r1);
  await roundTrip(d);

  h.fixtures.set(CDS, ClusterSchema, { name: 'c1', altStatName: 'bad' });
  await h.server.pushAll({ reason: 'config' });
  const r2 = await d.next();
  const rejects = await counterValue('pilot_total_xds_rejects', { type: 'cds' });
  const expired = await counterValue('pilot_xds_expired_nonce', { type: 'cds' });
  d.send({ typeUrl: CDS, responseNonce: r2.nonce, errorDetail: { code: status.INVALID_ARGUMENT, message: 'cluster c1 is bad' } });
  d.send({ typeUrl: CDS, responseNonce: 'not-a-nonce-we-sent' });
  await roundTrip(d);
  assert.equal(await counterValue('pilot_total_xds_rejects', { type: 'cds' }), rejects + 1);
  assert.equal(await counterValue('pilot_xds_expired_nonce', { type: 'cds' }), expired + 1);
  const w = watch(h, CDS);
  assert.equal(w?.state, 'NACKED');
  assert.equal(w?.acked?.version, r1.systemVersionInfo);
  assert.equal(w?.lastNack?.message, 'cluster c1 is bad');
  assert.equal(w?.lastNack?.rejectedVersion, r2.systemVersionInfo);

  // The rejected content is not resent on an unrelated push.
  await h.server.pushAll({ reason: 'config' });
  await roundTrip(d);
});

test('Delta: a first request without node ends the stream; the server serves the next one', async (t) => {
  const h = await setup(t);
  const bad = delta(h.client());
  bad.send({ typeUrl: CDS });
  const st = await bad.status();
  assert.equal(st.code, status.INVALID_ARGUMENT);
  assert.match(st.details, /node/);
  const d = delta(h.client());
  d.send({ node: node(PROXY), typeUrl: CDS });
  assert.deepEqual(names(await d.next()), ['c1', 'c2']);
});
