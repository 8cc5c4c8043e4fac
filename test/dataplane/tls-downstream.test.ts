// mesh-proxy terminating mutual TLS on a listener, with its chains from a real ADS stream and its
// certificate and roots from the agent's real SDS server; `openssl s_client` (Debian openssl) as
// the client: no certificate, a certificate with the wrong SPIFFE id and a good one, and a
// plaintext chain on the same port beside the TLS one (PERMISSIVE).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import {
  HttpConnectionManager_ForwardClientCertDetails as Forward,
  HttpConnectionManager_SetCurrentClientCertDetailsSchema as SetCurrentSchema,
  HttpConnectionManagerSchema,
} from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { pack, TypeUrl, unpack } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { freePort } from '../../samples/local-mesh.js';
import { downstreamTls, echo, meshCa, meshTls, sidecar, spiffe, tlsInspector, workload } from './tls-fixtures.js';
import { hcmChain, listener, staticCluster } from './xds-fixtures.js';

interface SClient {
  readonly out: string;
  readonly err: string;
}

/** One HTTP/1.1 request through `openssl s_client`; stdout is the server's answer. */
function sClient(port: number, args: readonly string[], request: string): Promise<SClient> {
  return new Promise((resolve, reject) => {
    const p = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-quiet', '-ign_eof', '-verify_return_error', ...args]);
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('error', reject);
    p.on('close', () => resolve({ out, err }));
    p.stdin.end(request);
  });
}

const GET = 'GET /who HTTP/1.1\r\nhost: server.default\r\nx-forwarded-client-cert: By=spoofed\r\nconnection: close\r\n\r\n';

test('a TLS chain from ADS with SDS secrets: client certificates checked, SPIFFE id in XFCC, plaintext chain beside it', async (t) => {
  const ca = await meshCa();
  const server = await workload(t, ca, 'server');
  const { ads, admin, proxy } = await sidecar(t, server);
  const app = await echo(t, 'app');
  const port = await freePort();
  const tlsChain = hcmChain({ cluster: 'app', statPrefix: 'inbound_tls' }, {
    filterChainMatch: { transportProtocol: 'tls' },
    transportSocket: downstreamTls(meshTls([spiffe('client')])),
  });
  // XFCC as the Go mesh's inbound HCM sets it: the peer's details replace what the client sent.
  const hcm = tlsChain.filters![0]!;
  const cfg = unpack((hcm.configType as { value: Any }).value, HttpConnectionManagerSchema);
  cfg.forwardClientCertDetails = Forward.APPEND_FORWARD;
  cfg.setCurrentClientCertDetails = create(SetCurrentSchema, { uri: true, dns: true, subject: true });
  hcm.configType = { case: 'typedConfig', value: pack(HttpConnectionManagerSchema, cfg) };
  const plainChain = hcmChain({ cluster: 'app', statPrefix: 'inbound_plain', serverName: 'plaintext-chain' }, { filterChainMatch: { transportProtocol: 'raw_buffer' } });
  ads.set(TypeUrl.Cluster, [staticCluster('app', [app])]);
  ads.set(TypeUrl.Listener, [listener('inbound', port, [tlsChain, plainChain], { listenerFilters: [tlsInspector] })]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  // Ready only once the listener's secrets came over SDS from the agent.
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);

  const dir = server.dir;
  const root = join(dir, 'root.pem');
  writeFileSync(root, ca.rootPem);
  const creds = async (sa: string): Promise<string[]> => {
    const { keyPem, chainPem } = await ca.issue(spiffe(sa));
    writeFileSync(join(dir, `${sa}.key`), keyPem);
    writeFileSync(join(dir, `${sa}.crt`), chainPem);
    return ['-cert', join(dir, `${sa}.crt`), '-key', join(dir, `${sa}.key`)];
  };

  // The server's certificate is the workload's, verified by openssl against the mesh root.
  const none = await sClient(port, ['-CAfile', root], GET);
  assert.doesNotMatch(none.out, /HTTP\/1\.1 200/, 'no client certificate: refused');
  const wrong = await sClient(port, ['-CAfile', root, ...(await creds('intruder'))], GET);
  assert.doesNotMatch(wrong.out, /HTTP\/1\.1 200/, 'a client certificate with another SPIFFE id: refused');
  const good = await sClient(port, ['-CAfile', root, ...(await creds('client'))], GET);
  assert.match(good.out, /HTTP\/1\.1 200/, `the mesh client is served (${good.err})`);
  const seen = JSON.parse(good.out.slice(good.out.indexOf('{'))) as { headers: Record<string, string> };
  assert.equal(seen.headers['x-forwarded-proto'], 'https');
  const xfcc = seen.headers['x-forwarded-client-cert']!;
  assert.match(xfcc, /^By=spoofed,By=spiffe:\/\/cluster\.local\/ns\/default\/sa\/server;Hash=[0-9a-f]{64};Subject="";URI=spiffe:\/\/cluster\.local\/ns\/default\/sa\/client$/, xfcc);

  // The same port in plaintext: the raw_buffer chain, which sanitizes XFCC.
  const plain = await fetch(`http://127.0.0.1:${port}/who`, { headers: { 'x-forwarded-client-cert': 'By=spoofed' } });
  assert.equal(plain.headers.get('server'), 'plaintext-chain');
  assert.equal(((await plain.json()) as { headers: Record<string, string> }).headers['x-forwarded-client-cert'], undefined);

  const stats = await (await fetch(`${admin}/stats`)).text();
  const stat = (name: string) => Number(new RegExp(`^listener\\.127\\.0\\.0\\.1_${port}\\.ssl\\.${name}: (\\d+)$`, 'm').exec(stats)?.[1]);
  assert.equal(stat('fail_verify_no_cert'), 1, stats);
  assert.equal(stat('fail_verify_san'), 1);
  assert.equal(stat('handshake'), 1);

  // config_dump: both secrets active, the private key redacted.
  const dump = (await (await fetch(`${admin}/config_dump`)).json()) as { configs: Array<Record<string, unknown>> };
  const secrets = dump.configs.find((c) => String(c['@type']).endsWith('SecretsConfigDump')) as { dynamic_active_secrets: Array<{ name: string; secret: { tls_certificate?: { private_key: { inline_bytes: string } } } }> };
  assert.deepEqual(secrets.dynamic_active_secrets.map((s) => s.name).sort(), ['ROOTCA', 'default']);
  const key = secrets.dynamic_active_secrets.find((s) => s.name === 'default')!.secret.tls_certificate!.private_key.inline_bytes;
  assert.equal(Buffer.from(key, 'base64').toString(), '[redacted]');
  assert.ok(proxy.xds.secrets.pending().length === 0);
});
