import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServerCredentials } from '@grpc/grpc-js';
import { loadSettings } from '../../src/common/env.js';
import { selfSignedCertificate } from '../../src/webhooks/selfsigned.js';
import { xdsCredentials } from '../../src/agent/xds-credentials.js';
import { XdsProxy } from '../../src/agent/xds-proxy.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { FakeAds } from './fake-ads.js';

test('XDS_ROOT_CA=<file>: the upstream stream is TLS, verified against that root', async (t) => {
  const { certPem, keyPem } = await selfSignedCertificate(['localhost']);
  const rootFile = join(mkdtempSync(join(tmpdir(), 'xdsca-')), 'root.pem');
  writeFileSync(rootFile, certPem);
  const ads = await FakeAds.start(0, ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(certPem), private_key: Buffer.from(keyPem) }]), 'localhost');
  loadSettings('agent', { XDS_ROOT_CA: rootFile });
  const xds = new XdsProxy({ upstreamAddress: ads.address, listenAddress: '127.0.0.1:0', credentials: xdsCredentials(ads.address) });
  const port = await xds.start();
  const proxy = new AdsClient({ address: `127.0.0.1:${port}`, node: { id: 'n' }, onUpdate: () => undefined });
  t.after(() => (proxy.close(), xds.close(), ads.stop()));
  proxy.start();
  const s = await ads.streams.next();
  assert.equal((await s.requests.next()).typeUrl, TypeUrl.Cluster);
});

test('XDS_ROOT_CA naming an unreadable file is an error naming the variable', () => {
  loadSettings('agent', { XDS_ROOT_CA: '/nonexistent/root.pem' });
  assert.throws(() => xdsCredentials('meshd:15012'), /XDS_ROOT_CA="\/nonexistent\/root\.pem": cannot read the root certificate/);
});
