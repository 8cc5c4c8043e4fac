// mesh-proxy with --concurrency 3 (this process and two workers) terminating mTLS with SDS
// secrets: every process serves the TLS chain with the agent's certificate, and a renewal the
// agent pushes reaches every worker before the proxy reports it applied: new handshakes on
// every process get the new certificate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { TypeUrl } from '../../src/envoy/types.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually, Running, start, statValue } from '../helpers/proc.js';
import { downstreamTls, echo, meshCa, meshTls, sidecarBootstrap, spiffe, tlsInspector, workload } from './tls-fixtures.js';
import { FixtureAds, hcmChain, listener, staticCluster } from './xds-fixtures.js';

test('--concurrency 3: every worker serves the SDS certificate, and a renewal reaches them all', async (t) => {
  const ca = await meshCa();
  const w = await workload(t, ca, 'server');
  const ads = await new FixtureAds().listen();
  t.after(() => ads.close());
  const app = await echo(t, 'app');
  const [adminPort, port] = [await freePort(), await freePort()];
  ads.set(TypeUrl.Cluster, [staticCluster('app', [app])]);
  ads.set(TypeUrl.Listener, [listener('inbound', port, [hcmChain({ cluster: 'app' }, { transportSocket: downstreamTls(meshTls([spiffe('client')])) })], { listenerFilters: [tlsInspector] })]);
  const proxy = new Running(start('mesh-proxy', ['-c', sidecarBootstrap(w, ads.port, adminPort), '--concurrency', '3', '--drain-time-s', '1']));
  t.after(() => proxy.stop('SIGKILL'));
  const admin = `http://127.0.0.1:${adminPort}`;
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200, proxy.output), 30_000);

  const { keyPem, chainPem } = await ca.issue(spiffe('client'));
  /** One request on a new connection: the serial of the certificate it got, and the answer. */
  const call = (): Promise<{ serial: string; status: string }> =>
    new Promise((resolve, reject) => {
      const s = tlsConnect({ host: '127.0.0.1', port, ca: ca.rootPem, cert: chainPem, key: keyPem, checkServerIdentity: () => undefined }, () => {
        const serial = s.getPeerX509Certificate()!.serialNumber;
        let text = '';
        s.on('data', (d: Buffer) => (text += d.toString()));
        s.on('end', () => resolve({ serial, status: text.split('\r\n')[0]! }));
        s.write('GET / HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n');
      });
      s.on('error', reject);
    });
  const first = new X509Certificate(readFileSync(join(w.certDir, 'cert-chain.pem'), 'utf8')).serialNumber;
  // Connections go round robin over the three processes: six of them reach each twice.
  for (let i = 0; i < 6; i++) assert.deepEqual(await call(), { serial: first, status: 'HTTP/1.1 200 OK' });
  const workerCx = async (i: number) => statValue(await (await fetch(`${admin}/stats`)).text(), `listener.127.0.0.1_${port}.worker_${i}.downstream_cx_total`);
  assert.deepEqual(await Promise.all([0, 1, 2].map(workerCx)), [2, 2, 2], 'each process served TLS connections');

  const sdsUpdates = async () => statValue(await (await fetch(`${admin}/stats`)).text(), 'sds.update_success');
  const before = await sdsUpdates();
  const renewed = new X509Certificate(await w.renew()).serialNumber;
  // An SDS update counts as applied (and is ACKed) only once every worker applied it too.
  await eventually(async () => assert.ok((await sdsUpdates()) > before, 'another SDS update'), 15_000);
  for (let i = 0; i < 6; i++) assert.deepEqual(await call(), { serial: renewed, status: 'HTTP/1.1 200 OK' });
});
