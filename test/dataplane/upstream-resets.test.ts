// An HTTP/2 upstream that resets a stream before answering: the client gets Envoy's 503 naming the
// reset as Envoy's router does (remote reset; remote refused stream reset for REFUSED_STREAM), and a
// stream that only ended (NO_ERROR) without a response is a remote reset too.
import assert from 'node:assert/strict';
import { constants, createServer as createH2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { rawGet } from '../helpers/http.js';
import { boundPort } from './xds-fixtures.js';
import { httpCluster, proxyPerCluster } from './cluster-stats-fixtures.js';

const RESETS: Record<string, number> = {
  '/internal': constants.NGHTTP2_INTERNAL_ERROR,
  '/refused': constants.NGHTTP2_REFUSED_STREAM,
  '/no-error': constants.NGHTTP2_NO_ERROR,
};

const h2 = createH2Server();
h2.on('stream', (stream, headers) => {
  // Closing with an error code is also an 'error' on the server's own stream.
  stream.on('error', () => {});
  stream.close(RESETS[String(headers[':path'])] ?? constants.NGHTTP2_CANCEL);
});

describe('HTTP/2 upstream resets', { timeout: 30_000 }, () => {
  let proxy: MeshProxy;
  let stop: () => Promise<void>;

  before(async () => {
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
    ({ proxy, stop } = await proxyPerCluster([httpCluster('h2', (h2.address() as AddressInfo).port, { h2: true })]));
  });

  after(async () => {
    await stop?.();
    await new Promise((r) => h2.close(r));
  });

  const reasonOf = async (path: string) => {
    const r = await rawGet(boundPort(proxy, 'h2'), path);
    assert.equal(r.status, 503);
    return r.body.replace('upstream connect error or disconnect/reset before headers. reset reason: ', '');
  };

  it('RST_STREAM before the response: remote reset, or remote refused stream reset for REFUSED_STREAM', async () => {
    assert.equal(await reasonOf('/internal'), 'remote reset');
    assert.equal(await reasonOf('/refused'), 'remote refused stream reset');
    assert.equal(await reasonOf('/no-error'), 'remote reset');
  });
});
