// A cluster's connect_timeout through a real proxy: an upstream whose listen queue is full never
// completes a TCP handshake (the kernel drops the SYNs it cannot queue), so the proxy's connection
// times out: the client gets Envoy's 503 (reset reason `connection timeout`), and /stats counts the connection as timed out and failed,
// and the request as pending but never attached to a connection.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { rawGet } from '../helpers/http.js';
import { boundPort, hcmChain } from './xds-fixtures.js';
import { clusterStats, httpCluster, proxyPerCluster, settles } from './cluster-stats-fixtures.js';

/** A socket listening with a backlog of 0 that never accepts (node's servers always accept). */
const NEVER_ACCEPTS = [
  'import socket, sys, time',
  's = socket.socket()',
  "s.bind(('127.0.0.1', 0))",
  's.listen(0)',
  'print(s.getsockname()[1], flush=True)',
  'sys.stdin.read()',
].join('\n');

/** Connects; true once connected, false if the handshake has not completed within `ms`. */
function handshakes(port: number, sockets: Socket[], ms: number): Promise<boolean> {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  socket.on('error', () => {});
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

describe('cluster connect_timeout', { timeout: 30_000 }, () => {
  let listener: ChildProcess;
  const fillers: Socket[] = [];
  let proxy: MeshProxy;
  let stop: () => Promise<void>;

  before(async () => {
    listener = spawn('python3', ['-c', NEVER_ACCEPTS], { stdio: ['pipe', 'pipe', 'inherit'] });
    const port = await new Promise<number>((resolve, reject) => {
      listener.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      listener.once('error', reject);
    });
    // Fill the listen queue: once a handshake does not complete, none will.
    let full = false;
    for (let i = 0; i < 8 && !full; i++) full = !(await handshakes(port, fillers, 500));
    assert.ok(full, 'the listen queue never filled');
    // Two more clusters of the same upstream, with a connect timeout longer than their routes' per-try timeout.
    const slowConnect = { connectTimeout: { seconds: 5n } };
    const retryOn = new Map([['before-request', 'reset-before-request'], ['connect-only', 'connect-failure']]);
    ({ proxy, stop } = await proxyPerCluster(
      [httpCluster('unanswered', port, {}, { connectTimeout: { seconds: 0n, nanos: 300_000_000 } }), httpCluster('before-request', port, {}, slowConnect), httpCluster('connect-only', port, {}, slowConnect)],
      (c) => hcmChain({ cluster: c, statPrefix: c, ...(retryOn.has(c) ? { retry: { retryOn: retryOn.get(c)!, numRetries: 1, perTryTimeout: { nanos: 200_000_000 } } } : {}) }),
    ));
  });

  after(async () => {
    await stop?.();
    for (const s of fillers) s.destroy();
    listener?.stdin?.end();
    listener?.kill();
  });

  it('a connection the upstream never completes fails after connect_timeout: 503, upstream_cx_connect_timeout and _connect_fail, the request pending, never in upstream_rq_total', async () => {
    const started = performance.now();
    const r = await rawGet(boundPort(proxy, 'unanswered'), '/');
    const waited = performance.now() - started;
    assert.equal(r.status, 503);
    assert.equal(r.body, 'upstream connect error or disconnect/reset before headers. reset reason: connection timeout');
    // Not before the connect timeout; that it was the timeout, not the kernel giving up, is upstream_cx_connect_timeout.
    assert.ok(waited >= 290, `answered after ${Math.round(waited)} ms, before the 300 ms connect timeout`);
    const stats = ['upstream_cx_total', 'upstream_cx_connect_timeout', 'upstream_cx_connect_fail', 'upstream_cx_active', 'upstream_rq_total', 'upstream_rq_pending_total', 'upstream_rq_pending_active'] as const;
    await settles(proxy, 'unanswered', stats, { upstream_cx_total: 1, upstream_cx_connect_timeout: 1, upstream_cx_connect_fail: 1, upstream_rq_pending_total: 1 });
  });

  it('a per-try timeout while the connection is still connecting is retried under reset-before-request (nothing was sent), not under connect-failure', async () => {
    const perTry = async (cluster: string) => {
      const r = await rawGet(boundPort(proxy, cluster), '/');
      assert.deepEqual([r.status, r.body], [504, 'upstream request timeout'], cluster);
      return (await clusterStats(proxy, cluster, ['upstream_rq_per_try_timeout', 'upstream_cx_total'])) as Record<string, number>;
    };
    assert.deepEqual(await perTry('before-request'), { upstream_rq_per_try_timeout: 2, upstream_cx_total: 2 }, 'the try and its retry, each on a connection of its own');
    assert.deepEqual(await perTry('connect-only'), { upstream_rq_per_try_timeout: 1, upstream_cx_total: 1 }, 'a per-try timeout is no connect failure');
  });
});
