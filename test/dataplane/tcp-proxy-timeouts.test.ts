// tcp_proxy idle_timeout and max_downstream_connection_duration over a real listener and a real
// upstream: a connection through which no byte passes either way for the timeout is closed on both
// sides and counted in tcp.<prefix>.idle_timeout, bytes in either direction keep it open, 0s turns
// the timeout off, and an unset one is Envoy's hour; a connection open for the maximum duration is
// closed however busy, counted in tcp.<prefix>.max_downstream_connection_duration_reached.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { boundPort, listener, staticCluster, startFixtureProxy } from './xds-fixtures.js';

const duration = (ms: number) => ({ seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });

/** A tcp_proxy chain to `cluster` under stat prefix `prefix`, with this idle_timeout (undefined: unset) and maximum duration. */
function chain(prefix: string, cluster: string, idleMs?: number, maxMs?: number) {
  const limits = { ...(idleMs === undefined ? {} : { idleTimeout: duration(idleMs) }), ...(maxMs === undefined ? {} : { maxDownstreamConnectionDuration: duration(maxMs) }) };
  return { filters: [{ name: 'envoy.filters.network.tcp_proxy', configType: { case: 'typedConfig' as const, value: pack(TcpProxySchema, { statPrefix: prefix, clusterSpecifier: { case: 'cluster', value: cluster }, ...limits }) } }] };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('tcp_proxy idle_timeout', () => {
  let upstream: Server;
  /** Upstream sockets still open. */
  const open = new Set<Socket>();
  let fixture: { proxy: MeshProxy; stop(): Promise<void> };
  const stat = (name: string): number => fixture.proxy.stats.samples().find((s) => s.name === name)?.value ?? 0;

  before(async () => {
    // An echo server that also speaks first (a greeting, as SMTP or MySQL servers do).
    upstream = createServer((s) => {
      open.add(s);
      s.on('close', () => open.delete(s));
      s.write('hello\n');
      s.pipe(s);
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const port = (upstream.address() as AddressInfo).port;
    fixture = await startFixtureProxy([staticCluster('echo', [port])], [
      listener('short', 0, [chain('short', 'echo', 400)]),
      listener('off', 0, [chain('off', 'echo', 0)]),
      listener('unset', 0, [chain('unset', 'echo')]),
      listener('bounded', 0, [chain('bounded', 'echo', undefined, 700)]),
    ]);
  });

  after(async () => {
    await fixture?.stop();
    for (const s of open) s.destroy();
    upstream?.close();
  });

  /** A client through listener `name`, once the upstream's greeting has come back through it. */
  async function client(name: string): Promise<{ socket: Socket; received: () => string }> {
    const socket = connect(boundPort(fixture.proxy, name), '127.0.0.1');
    let data = '';
    socket.on('data', (d: Buffer) => void (data += d.toString()));
    await eventually(() => assert.equal(data, 'hello\n', 'the greeting'), 5_000);
    return { socket, received: () => data };
  }

  it('bytes either way keep the connection open; none for the timeout close both sides, counted', async () => {
    const c = await client('short');
    // 900 ms in all, never 400 ms without a byte: still open, every byte echoed.
    for (let i = 0; i < 6; i++) {
      await sleep(150);
      c.socket.write(`${i}`);
    }
    await eventually(() => assert.equal(c.received(), 'hello\n012345'), 5_000);
    assert.equal(c.socket.destroyed, false, 'closed while bytes were passing');
    assert.equal(stat('tcp.short.idle_timeout'), 0);
    const upstreamBefore = open.size;
    await eventually(() => assert.ok(c.socket.destroyed, 'the proxy closed the idle connection'), 5_000);
    assert.equal(stat('tcp.short.idle_timeout'), 1);
    await eventually(() => assert.equal(open.size, upstreamBefore - 1, 'the upstream side is closed too'), 5_000);
  });

  it('0s turns it off, and unset is an hour: idle connections stay open past the short timeout', async () => {
    const off = await client('off');
    const unset = await client('unset');
    await sleep(1_000);
    assert.equal(off.socket.destroyed, false);
    assert.equal(unset.socket.destroyed, false);
    off.socket.write('still');
    await eventually(() => assert.equal(off.received(), 'hello\nstill'), 5_000);
    assert.equal(stat('tcp.off.idle_timeout') + stat('tcp.unset.idle_timeout'), 0);
    off.socket.destroy();
    unset.socket.destroy();
  });

  it('max_downstream_connection_duration closes a busy connection once it has been open that long, counted', async () => {
    const c = await client('bounded');
    for (let i = 0; i < 4; i++) {
      await sleep(100);
      c.socket.write(`${i}`);
    }
    assert.equal(c.socket.destroyed, false);
    await eventually(() => assert.ok(c.socket.destroyed, 'closed at its maximum duration'), 5_000);
    assert.equal(stat('tcp.bounded.max_downstream_connection_duration_reached'), 1);
    assert.equal(stat('tcp.bounded.idle_timeout'), 0);
  });
});
