import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import type { Any } from '@bufbuild/protobuf/wkt';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { XdsStreamError, type ProxyInfo } from '../../src/xds/generator.js';
import { TypeUrl, unpackAny } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { counterValue, gaugeValue, node, sotw, startServer, type Harness, type SotwStream } from './harness.js';

const PROXY = 'sidecar~10.0.0.1~app-1.foo~foo.svc.cluster.local';
const LDS = TypeUrl.Listener;
const CDS = TypeUrl.Cluster;
const RDS = TypeUrl.RouteConfiguration;
const EDS = TypeUrl.ClusterLoadAssignment;

function namesOf(resources: readonly Any[]): string[] {
  return resources
    .map((r) => {
      const m = unpackAny(r) as { name?: string; clusterName?: string };
      return m.clusterName ?? m.name ?? '';
    })
    .sort();
}

function fixtures(h: Harness): void {
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1', statPrefix: 'v1' });
  h.fixtures.set(LDS, ListenerSchema, { name: 'l2' });
  h.fixtures.set(CDS, ClusterSchema, { name: 'c1' });
  h.fixtures.set(CDS, ClusterSchema, { name: 'c2' });
  h.fixtures.set(RDS, RouteConfigurationSchema, { name: 'r1' });
  h.fixtures.set(RDS, RouteConfigurationSchema, { name: 'r2' });
  h.fixtures.setNamed(EDS, 'c1', ClusterLoadAssignmentSchema, { clusterName: 'c1' });
  h.fixtures.setNamed(EDS, 'c2', ClusterLoadAssignmentSchema, { clusterName: 'c2' });
}

async function setup(t: { after(fn: () => void): void }): Promise<Harness> {
  const h = await startServer();
  t.after(() => h.close());
  fixtures(h);
  return h;
}

function ack(s: SotwStream, r: DiscoveryResponse, resourceNames: string[] = []): void {
  s.send({ typeUrl: r.typeUrl, versionInfo: r.versionInfo, responseNonce: r.nonce, resourceNames });
}

/** Opens a stream and fetches `typeUrl`; the first response is returned un-acked. */
async function open(h: Harness, typeUrl: string, resourceNames: string[] = [], id = PROXY): Promise<[SotwStream, DiscoveryResponse]> {
  const s = sotw(h.client());
  s.send({ node: node(id), typeUrl, resourceNames });
  return [s, await s.next()];
}

/**
 * Proves that nothing was sent since the last consumed response: a fresh request (no nonce) for
 * `typeUrl` is always answered, and the stream is ordered, so its answer must come next.
 */
async function roundTrip(s: SotwStream, typeUrl: string, resourceNames: string[] = []): Promise<DiscoveryResponse> {
  s.send({ typeUrl, resourceNames });
  const r = await s.next();
  assert.equal(r.typeUrl, typeUrl, `expected only the ${typeUrl} answer, got a ${r.typeUrl} response first`);
  return r;
}

function watch(h: Harness, typeUrl: string, id = PROXY) {
  const conn = h.server.connections().find((c) => c.proxyId === id);
  return conn?.watches.find((w) => w.typeUrl === typeUrl);
}

test('SotW: initial wildcard fetch, then ACK produces no response and marks the version acked', async (t) => {
  const h = await setup(t);
  const [s, r] = await open(h, LDS);
  assert.equal(r.typeUrl, LDS);
  assert.deepEqual(namesOf(r.resources), ['l1', 'l2']);
  assert.notEqual(r.versionInfo, '');
  assert.notEqual(r.nonce, '');
  assert.equal(watch(h, LDS)?.state, 'STALE');

  ack(s, r);
  await roundTrip(s, CDS);
  const w = watch(h, LDS);
  assert.equal(w?.state, 'SYNCED');
  assert.equal(w?.acked?.version, r.versionInfo);
  assert.equal(w?.acked?.nonce, r.nonce);
  assert.equal(w?.wildcard, true);
  const gen = h.fixtures.calls.find((c) => c.typeUrl === LDS);
  assert.equal(gen?.proxy.id, PROXY);
  assert.equal(h.server.proxyInfo(PROXY), gen?.proxy);
  assert.equal(h.server.proxyInfo('not~connected'), undefined);
  assert.deepEqual(gen?.proxy.metadata, { NAMESPACE: 'default' });
});

test('SotW: awaitsReplies until every stream has answered its last response, an ACK or a NACK', async (t) => {
  const h = await setup(t);
  assert.equal(h.server.awaitsReplies(), false);
  const [s, l] = await open(h, LDS);
  assert.equal(h.server.awaitsReplies(), true);
  const [s2, c2] = await open(h, CDS, [], 'other~proxy');
  // The LDS ACK is read before the CDS request after it: then only the new CDS response is unanswered.
  ack(s, l);
  const c = await roundTrip(s, CDS);
  assert.equal(watch(h, LDS)?.state, 'SYNCED');
  ack(s2, c2);
  await eventually(() => assert.equal(watch(h, CDS, 'other~proxy')?.state, 'SYNCED'));
  assert.equal(h.server.awaitsReplies(), true, 'the first stream has not answered its CDS response');
  // A NACK is a reply too.
  s.send({ typeUrl: CDS, versionInfo: '', responseNonce: c.nonce, errorDetail: { code: status.INVALID_ARGUMENT, message: 'bad cluster' } });
  await eventually(() => assert.equal(h.server.awaitsReplies(), false));
  assert.equal(watch(h, CDS)?.state, 'NACKED');
});

test('SotW: equal content gets an equal version on another stream', async (t) => {
  const h = await setup(t);
  const [, r1] = await open(h, CDS);
  const [, r2] = await open(h, CDS, [], 'other~proxy');
  assert.equal(r1.versionInfo, r2.versionInfo);
  assert.notEqual(r1.nonce, r2.nonce);
});

test('SotW: push sends only changed types, and nothing when content is unchanged', async (t) => {
  const h = await setup(t);
  const [s, l] = await open(h, LDS);
  ack(s, l);
  s.send({ typeUrl: CDS });
  const c = await s.next();
  ack(s, c);

  await h.server.pushAll({ reason: 'test', types: new Set([LDS, CDS]) });
  await roundTrip(s, RDS, ['r1']);

  h.fixtures.set(CDS, ClusterSchema, { name: 'c1', altStatName: 'changed' });
  const ldsCalls = h.fixtures.calls.filter((x) => x.typeUrl === LDS).length;
  await h.server.pushAll({ reason: 'endpoint', types: new Set([CDS]) });
  const c2 = await s.next();
  assert.equal(c2.typeUrl, CDS);
  assert.notEqual(c2.versionInfo, c.versionInfo);
  assert.deepEqual(namesOf(c2.resources), ['c1', 'c2']);
  assert.equal(h.fixtures.calls.filter((x) => x.typeUrl === LDS).length, ldsCalls, 'LDS was not regenerated');
  assert.equal(h.fixtures.calls.at(-1)?.push?.reason, 'endpoint');
  ack(s, c2);
  await roundTrip(s, RDS, ['r1']);
});

test('SotW: a push of a type subscribed by name carries only what changed since the acked response; after a NACK, everything', async (t) => {
  const h = await setup(t);
  const [s, e1] = await open(h, EDS, ['c1', 'c2']);
  assert.deepEqual(namesOf(e1.resources), ['c1', 'c2']);
  ack(s, e1, ['c1', 'c2']);
  await roundTrip(s, CDS); // the ACK is in before the push

  h.fixtures.setNamed(EDS, 'c1', ClusterLoadAssignmentSchema, { clusterName: 'c1', endpoints: [{ priority: 1 }] });
  await h.server.pushAll({ reason: 'endpoint', types: new Set([EDS]) });
  const e2 = await s.next();
  assert.notEqual(e2.versionInfo, e1.versionInfo);
  assert.deepEqual(namesOf(e2.resources), ['c1'], 'only the changed assignment');
  assert.deepEqual(watch(h, EDS)?.sent?.resourceNames.sort(), ['c1', 'c2'], 'what the proxy holds after it');

  // Rejected: the proxy may hold anything, so the next push carries the whole set.
  s.send({ typeUrl: EDS, versionInfo: e1.versionInfo, responseNonce: e2.nonce, resourceNames: ['c1', 'c2'], errorDetail: { code: status.INVALID_ARGUMENT, message: 'bad priority' } });
  await roundTrip(s, CDS);
  h.fixtures.setNamed(EDS, 'c2', ClusterLoadAssignmentSchema, { clusterName: 'c2', endpoints: [{}] });
  await h.server.pushAll({ reason: 'endpoint', types: new Set([EDS]) });
  const e3 = await s.next();
  assert.deepEqual(namesOf(e3.resources), ['c1', 'c2']);
});

test('SotW: NACK keeps the acked version, is recorded and counted, and the rejected config is not resent', async (t) => {
  const h = await setup(t);
  const [s, r1] = await open(h, LDS);
  ack(s, r1);
  await roundTrip(s, CDS); // the ACK is in before the push, else it would be stale
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1', statPrefix: 'bad' });
  await h.server.pushAll({ reason: 'config' });
  const r2 = await s.next();
  assert.notEqual(r2.versionInfo, r1.versionInfo);

  const rejects = await counterValue('pilot_total_xds_rejects', { type: 'lds' });
  s.send({
    typeUrl: LDS,
    versionInfo: r1.versionInfo,
    responseNonce: r2.nonce,
    errorDetail: { code: status.INVALID_ARGUMENT, message: 'listener l1: bad stat prefix' },
  });
  await roundTrip(s, CDS);
  assert.equal(await counterValue('pilot_total_xds_rejects', { type: 'lds' }), rejects + 1);
  assert.equal(await gaugeValue('pilot_xds_lds_reject'), 1);
  let w = watch(h, LDS);
  assert.equal(w?.state, 'NACKED');
  assert.equal(w?.acked?.version, r1.versionInfo);
  assert.equal(w?.lastNack?.message, 'listener l1: bad stat prefix');
  assert.equal(w?.lastNack?.rejectedVersion, r2.versionInfo);
  assert.equal(w?.lastNack?.keptVersion, r1.versionInfo);

  await h.server.pushAll({ reason: 'config' });
  await roundTrip(s, RDS, ['r1']);

  h.fixtures.set(LDS, ListenerSchema, { name: 'l1', statPrefix: 'fixed' });
  await h.server.pushAll({ reason: 'config', types: new Set([LDS]) });
  const r3 = await s.next();
  assert.equal(r3.typeUrl, LDS);
  ack(s, r3);
  await roundTrip(s, CDS);
  w = watch(h, LDS);
  assert.equal(w?.state, 'SYNCED');
  assert.equal(w?.acked?.version, r3.versionInfo);
  assert.equal(w?.lastNack?.message, 'listener l1: bad stat prefix', 'the last NACK stays visible');
  assert.equal(await gaugeValue('pilot_xds_lds_reject'), 0);
});

test('SotW: a reply with a superseded nonce is ignored and counted', async (t) => {
  const h = await setup(t);
  const [s, r1] = await open(h, LDS);
  ack(s, r1);
  await roundTrip(s, CDS); // the ACK is in before the push, else it would be stale
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1', statPrefix: 'two' });
  await h.server.pushAll({ reason: 'config' });
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1', statPrefix: 'three' });
  await h.server.pushAll({ reason: 'config' });
  const r2 = await s.next();
  const r3 = await s.next();

  const expired = await counterValue('pilot_xds_expired_nonce', { type: 'lds' });
  ack(s, r2);
  // A NACK with an old nonce is stale too: it must not be recorded.
  s.send({ typeUrl: LDS, versionInfo: r1.versionInfo, responseNonce: r2.nonce, errorDetail: { code: 3, message: 'old' } });
  await roundTrip(s, CDS);
  assert.equal(await counterValue('pilot_xds_expired_nonce', { type: 'lds' }), expired + 2);
  let w = watch(h, LDS);
  assert.equal(w?.acked?.version, r1.versionInfo);
  assert.equal(w?.lastNack, undefined);
  assert.equal(w?.state, 'STALE');

  ack(s, r3);
  await roundTrip(s, CDS);
  w = watch(h, LDS);
  assert.equal(w?.acked?.version, r3.versionInfo);
  assert.equal(w?.state, 'SYNCED');
});

test('SotW: RDS and EDS are subscribed by name; names can grow, shrink and be dropped', async (t) => {
  const h = await setup(t);
  const [s, r] = await open(h, RDS, ['r1']);
  assert.deepEqual(namesOf(r.resources), ['r1']);
  assert.equal(watch(h, RDS)?.wildcard, false);

  ack(s, r, ['r1', 'r2', 'missing']);
  const r2 = await s.next();
  assert.deepEqual(namesOf(r2.resources), ['r1', 'r2']);

  // Same names in the ACK: no response.
  ack(s, r2, ['r1', 'r2', 'missing']);
  s.send({ typeUrl: EDS, resourceNames: ['c2'] });
  const e = await s.next();
  assert.equal(e.typeUrl, EDS);
  assert.deepEqual(namesOf(e.resources), ['c2']);

  // No names left: unsubscribed; a later route change is not sent.
  ack(s, r2, []);
  await roundTrip(s, CDS);
  assert.equal(watch(h, RDS), undefined);
  h.fixtures.set(RDS, RouteConfigurationSchema, { name: 'r1', validateClusters: true });
  await h.server.pushAll({ reason: 'config' });
  await roundTrip(s, CDS);
});

test('SotW: a malformed first request or an unknown type ends that stream with a reason; others go on', async (t) => {
  const h = await setup(t);
  const cases: Array<[string, Parameters<SotwStream['send']>[0], RegExp]> = [
    ['no node', { typeUrl: LDS }, /must carry a node/],
    ['no node id', { node: { metadata: {} }, typeUrl: LDS }, /node\.id is empty/],
    ['no metadata', { node: { id: PROXY }, typeUrl: LDS }, /has no metadata/],
    ['unknown type', { node: node(PROXY), typeUrl: 'type.googleapis.com/no.such.Type' }, /unknown type URL "type.googleapis.com\/no.such.Type"/],
    ['empty type', { node: node(PROXY) }, /type_url is empty/],
  ];
  const healthy = (await open(h, LDS, [], 'healthy~proxy'))[0];
  for (const [what, req, message] of cases) {
    const s = sotw(h.client());
    s.send(req);
    const st = await s.status();
    assert.equal(st.code, status.INVALID_ARGUMENT, what);
    assert.match(st.details, message, what);
  }
  // An unknown type later in a good stream ends it too.
  const [s, r] = await open(h, LDS);
  ack(s, r);
  s.send({ typeUrl: 'type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig' });
  assert.match((await s.status()).details, /unknown type URL/);

  await roundTrip(healthy, CDS);
  const [, again] = await open(h, CDS, [], 'new~proxy');
  assert.deepEqual(namesOf(again.resources), ['c1', 'c2']);
  assert.deepEqual(
    h.server.connections().map((c) => c.proxyId).sort(),
    ['healthy~proxy', 'new~proxy'],
  );
});

test('SotW: many concurrent streams each get their config and every push; push() targets one proxy', async (t) => {
  const h = await setup(t);
  const n = 24;
  const ids = Array.from({ length: n }, (_, i) => `sidecar~10.0.1.${i}~p-${i}.foo~foo.svc.cluster.local`);
  const clients = [h.client(), h.client(), h.client()];
  const streams = await Promise.all(
    ids.map(async (id, i) => {
      const s = sotw(clients[i % clients.length]!);
      s.send({ node: node(id), typeUrl: LDS });
      const r = await s.next();
      ack(s, r);
      return { id, s, r };
    }),
  );
  assert.equal(h.server.connections().length, n);
  assert.equal(await gaugeValue('pilot_xds'), n);

  h.fixtures.set(LDS, ListenerSchema, { name: 'l3' });
  const pushes = await counterValue('pilot_xds_pushes', { type: 'lds' });
  await h.server.pushAll({ reason: 'config', types: new Set([LDS]) });
  const next = await Promise.all(streams.map(({ s }) => s.next()));
  for (const r of next) assert.deepEqual(namesOf(r.resources), ['l1', 'l2', 'l3']);
  assert.equal(await counterValue('pilot_xds_pushes', { type: 'lds' }), pushes + n);
  streams.forEach(({ s }, i) => ack(s, next[i]!));

  h.fixtures.set(CDS, ClusterSchema, { name: 'c3' });
  const [one, ...others] = streams;
  one!.s.send({ typeUrl: CDS });
  const c = await one!.s.next();
  ack(one!.s, c);
  for (const o of others) o.s.send({ typeUrl: CDS });
  await Promise.all(others.map(async (o) => ack(o.s, await o.s.next())));
  h.fixtures.set(CDS, ClusterSchema, { name: 'c4' });
  await h.server.push(one!.id, { reason: 'proxy' });
  assert.deepEqual(namesOf((await one!.s.next()).resources), ['c1', 'c2', 'c3', 'c4']);
  await Promise.all(others.map((o) => roundTrip(o.s, RDS, ['r1'])));
});

test('SotW: a failing generator is counted, sends nothing, and the stream lives on', async (t) => {
  const h = await setup(t);
  const [s, r] = await open(h, LDS);
  ack(s, r);
  const errors = await counterValue('pilot_total_xds_internal_errors');
  h.fixtures.failWith = new Error('boom');
  await h.server.pushAll({ reason: 'config' });
  assert.equal(await counterValue('pilot_total_xds_internal_errors'), errors + 1);
  h.fixtures.failWith = undefined;
  await roundTrip(s, CDS);
  assert.equal(watch(h, LDS)?.acked?.version, r.versionInfo);
});

test('SotW: hooks see connect and disconnect; a refused proxy gets the hook error as status', async (t) => {
  const events: string[] = [];
  let disconnected!: () => void;
  const gone = new Promise<void>((resolve) => (disconnected = resolve));
  const h = await startServer({
    onConnect: (p: ProxyInfo) => {
      if (p.id === 'intruder') throw new XdsStreamError(status.PERMISSION_DENIED, `${p.id} is not allowed`);
      events.push(`connect ${p.id}`);
    },
    onDisconnect: (p: ProxyInfo) => {
      events.push(`disconnect ${p.id}`);
      disconnected();
    },
  });
  t.after(() => h.close());
  fixtures(h);
  const [s] = await open(h, LDS);
  const bad = sotw(h.client());
  bad.send({ node: node('intruder'), typeUrl: LDS });
  const st = await bad.status();
  assert.equal(st.code, status.PERMISSION_DENIED);
  assert.equal(st.details, 'intruder is not allowed');
  s.close();
  await gone;
  assert.deepEqual(events, [`connect ${PROXY}`, `disconnect ${PROXY}`]);
  assert.equal(h.server.connections().length, 0);
});

test('SotW: a send that does not complete within the send timeout ends the stream and is counted', async (t) => {
  const h = await startServer({ sendTimeoutMs: 50 });
  t.after(() => h.close());
  h.fixtures.set(LDS, ListenerSchema, { name: 'l1' });
  const timeouts = await counterValue('pilot_xds_write_timeout');
  const [s] = await open(h, LDS);
  // The client stops reading: once its buffers and the HTTP/2 flow-control windows are full, a
  // server write cannot complete. Push ever-changing large listeners until that happens.
  s.pause();
  for (let i = 0; i < 200 && h.server.connections().length > 0; i++) {
    h.fixtures.set(LDS, ListenerSchema, { name: 'l1', statPrefix: String(i).padEnd(256 * 1024, 'x') });
    await h.server.pushAll({ reason: 'test' });
  }
  assert.equal(h.server.connections().length, 0, 'the stuck stream was dropped');
  assert.equal(await counterValue('pilot_xds_write_timeout'), timeouts + 1);
  s.resume();
  const st = await s.status();
  assert.equal(st.code, status.DEADLINE_EXCEEDED);
  assert.match(st.details, /send did not complete within 50ms/);
});

test('listen accepts the Go-style ":port" (every interface) and reports a taken port by address', async (t) => {
  const h = await startServer();
  t.after(() => h.close());
  fixtures(h);
  const port = await h.server.listen(':0');
  assert.ok(port > 0);
  const s = sotw(h.client(`127.0.0.1:${port}`));
  s.send({ node: node(PROXY), typeUrl: CDS });
  assert.deepEqual(namesOf((await s.next()).resources), ['c1', 'c2']);
  await assert.rejects(h.server.listen(`127.0.0.1:${port}`), new RegExp(`cannot listen on 127.0.0.1:${port}`));
});
