// The TLS config paths around the handshake: secrets over the ADS stream and listener warming
// until they arrive (readiness, config_dump), NACKs naming what the proxy does not do, the
// ClientHello as tls_inspector reads it (SNI, ALPN), and x-forwarded-client-cert in every mode.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { connect as http2Connect } from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import { create } from '@bufbuild/protobuf';
import { AnySchema } from '@bufbuild/protobuf/wkt';
import { ClusterSchema, Cluster_DiscoveryType } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { DownstreamTlsContextSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import {
  HttpConnectionManager_ForwardClientCertDetails as Forward,
  HttpConnectionManagerSchema,
} from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { RequestHeaders } from '../../src/envoy/request.js';
import { classify } from '../../src/dataplane/listener/sniffers.js';
import { peerCertOf } from '../../src/dataplane/tls/context.js';
import { rememberPeer } from '../../src/dataplane/tls/peer.js';
import { compileXfcc } from '../../src/dataplane/tls/xfcc.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { echo, meshCa, sidecar, spiffe, tlsInspector, workload } from './tls-fixtures.js';
import { hcmChain, listener, staticCluster } from './xds-fixtures.js';

const ADS_SOURCE = { configSourceSpecifier: { case: 'ads' as const, value: {} } };

test('secrets over ADS: the TLS listener warms until its certificate arrives, then serves it', async (t) => {
  const ca = await meshCa();
  const w = await workload(t, ca, 'unused');
  const { ads, admin } = await sidecar(t, w);
  const app = await echo(t, 'app');
  const port = await freePort();
  const tls = pack(DownstreamTlsContextSchema, { commonTlsContext: { tlsCertificateSdsSecretConfigs: [{ name: 'gateway-cert', sdsConfig: ADS_SOURCE }], alpnProtocols: ['h2', 'http/1.1'] } });
  const chain = hcmChain({ cluster: 'app' }, { transportSocket: { name: 'envoy.transport_sockets.tls', configType: { case: 'typedConfig', value: tls } } });
  ads.set(TypeUrl.Cluster, [staticCluster('app', [app])]);
  ads.set(TypeUrl.Listener, [listener('gateway', port, [chain], { listenerFilters: [tlsInspector] })]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => {
    const r = await fetch(`${admin}/ready`);
    assert.equal(r.status, 503);
    assert.match(await r.text(), /secret gateway-cert/);
  });
  const dump = async () => ((await (await fetch(`${admin}/config_dump`)).json()) as { configs: Array<{ dynamic_warming_secrets?: Array<{ name: string }>; dynamic_active_secrets?: Array<{ name: string }> }> }).configs.find((c) => c.dynamic_warming_secrets || c.dynamic_active_secrets);
  assert.deepEqual((await dump())?.dynamic_warming_secrets?.map((s) => s.name), ['gateway-cert']);

  const { keyPem, chainPem } = await ca.issue(spiffe('gateway'), ['gateway.example.com']);
  const secret = pack(SecretSchema, { name: 'gateway-cert', type: { case: 'tlsCertificate', value: { certificateChain: { specifier: { case: 'inlineString', value: chainPem } }, privateKey: { specifier: { case: 'inlineString', value: keyPem } } } } });
  ads.set(TypeUrl.Secret, [{ name: 'gateway-cert', any: secret }]);
  await ads.push(TypeUrl.Secret);
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200));
  assert.deepEqual((await dump())?.dynamic_active_secrets?.map((s) => s.name), ['gateway-cert']);

  // A client without a certificate (none is asked for) gets the secret's certificate and a response.
  const served = await new Promise<{ serial: string; text: string }>((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, ca: ca.rootPem, servername: 'gateway.example.com' }, () => {
      const serial = s.getPeerX509Certificate()!.serialNumber;
      let text = '';
      s.on('data', (d: Buffer) => (text += d.toString()));
      s.on('end', () => resolve({ serial, text }));
      s.write('GET / HTTP/1.1\r\nhost: gateway.example.com\r\nconnection: close\r\n\r\n');
    });
    s.on('error', reject);
  });
  assert.equal(served.serial, new X509Certificate(chainPem).serialNumber);
  assert.match(served.text, /^HTTP\/1\.1 200/);

  // HTTP/2 over TLS: ALPN h2 from alpn_protocols, the HCM's codec AUTO sees the h2 preface.
  const session = http2Connect(`https://127.0.0.1:${port}`, { ca: ca.rootPem, servername: 'gateway.example.com' });
  t.after(() => session.close());
  const h2 = await new Promise<{ status: number; alpn: string | false | undefined; body: string }>((resolve, reject) => {
    const req = session.request({ ':path': '/h2', ':authority': 'gateway.example.com' });
    let body = '';
    req.on('response', (h) => {
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => resolve({ status: Number(h[':status']), alpn: session.alpnProtocol, body }));
    });
    req.on('error', reject);
  });
  assert.equal(h2.alpn, 'h2');
  assert.equal(h2.status, 200);
  assert.equal((JSON.parse(h2.body) as { who: string }).who, 'app');
});

test('TLS settings the proxy does not apply are NACKed naming the field; the last good config stays', async (t) => {
  const ca = await meshCa();
  const w = await workload(t, ca, 'nack');
  const { ads, proxy } = await sidecar(t, w);
  const port = await freePort();
  const bad = (name: string, value: object) => {
    const any = pack(DownstreamTlsContextSchema, { commonTlsContext: { tlsCertificateSdsSecretConfigs: [{ name: 'default', sdsConfig: ADS_SOURCE }], ...value } });
    return listener(name, port, [hcmChain({ cluster: 'app' }, { transportSocket: { name: 'envoy.transport_sockets.tls', configType: { case: 'typedConfig', value: any } } })]);
  };
  const nacks: string[] = [];
  proxy.xds.client.on('nack', (_type, _version, why) => nacks.push(why));
  ads.set(TypeUrl.Listener, [bad('crl', { validationContextType: { case: 'validationContext', value: { trustedCa: { specifier: { case: 'inlineString', value: ca.rootPem } }, crl: { specifier: { case: 'inlineString', value: 'x' } } } } })]);
  await ads.push(TypeUrl.Listener);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /listener crl\.filter_chains\[0\]\.transport_socket\.typed_config\.common_tls_context\.validation_context\.crl: holds no PEM CRL/));
  ads.set(TypeUrl.Listener, [bad('sans-without-ca', { validationContextType: { case: 'validationContext', value: { matchTypedSubjectAltNames: [{ sanType: 3, matcher: { matchPattern: { case: 'exact', value: spiffe('x') } } }] } } })]);
  await ads.push(TypeUrl.Listener);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /sans-without-ca.*validation_context: SAN or certificate pin checks without trusted_ca are refused/));
  const alts = create(AnySchema, { typeUrl: 'type.googleapis.com/envoy.extensions.transport_sockets.alts.v3.Alts' });
  ads.set(TypeUrl.Cluster, [{ name: 'c', any: pack(ClusterSchema, { name: 'c', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC }, transportSocket: { name: 'alts', configType: { case: 'typedConfig', value: alts } } }) }]);
  await ads.push(TypeUrl.Cluster);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /cluster c\.transport_socket\.typed_config: transport socket type envoy\.extensions\.transport_sockets\.alts\.v3\.Alts is not supported on a cluster/));
  assert.equal(proxy.listeners.info().length, 0, 'no listener was applied from the rejected updates');
});

/** tls_inspector alone. */
const TLS_ONLY = { tls: true, http: false, timeoutMs: 1000, continueOnTimeout: false };

test('tls_inspector reads SNI and ALPN from a real ClientHello', async (t) => {
  const first = await new Promise<Buffer>((resolve, reject) => {
    const server = createServer((s: Socket) => {
      let buf = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        if (classify(buf, TLS_ONLY)) {
          resolve(buf);
          s.destroy();
        }
      });
    });
    t.after(() => server.close());
    server.listen(0, '127.0.0.1', () => {
      const c = tlsConnect({ host: '127.0.0.1', port: (server.address() as { port: number }).port, servername: 'Reviews.Default.svc', ALPNProtocols: ['istio-peer-exchange', 'h2', 'http/1.1'] });
      c.on('error', () => undefined);
    });
    server.on('error', reject);
  });
  assert.equal(classify(first.subarray(0, 10), TLS_ONLY), undefined, 'an incomplete record: keep reading');
  assert.deepEqual(classify(first, TLS_ONLY), { transport: 'tls', protocols: ['istio-peer-exchange', 'h2', 'http/1.1'], serverName: 'reviews.default.svc' });
});

test('x-forwarded-client-cert in each forward_client_cert_details mode, in Envoy format', async () => {
  const ca = await meshCa();
  const client = new X509Certificate((await ca.issue(spiffe('client'), ['client.default.svc'])).chainPem);
  const own = new X509Certificate((await ca.issue(spiffe('server'))).chainPem);
  const mtls = { getX509Certificate: () => own, getPeerCertificate: () => ({ raw: client.raw, fingerprint256: client.fingerprint256 }) };
  rememberPeer(mtls as unknown as Socket, peerCertOf(client));
  const plain = {};
  const run = (mode: Forward, socket: object, set = {}) => {
    const xfcc = compileXfcc(create(HttpConnectionManagerSchema, { forwardClientCertDetails: mode, setCurrentClientCertDetails: set }));
    const h = new RequestHeaders([['x-forwarded-client-cert', 'By=earlier']]);
    xfcc(h, socket);
    return h.joined('x-forwarded-client-cert');
  };
  const hash = createHashHex(client.raw);
  assert.equal(run(Forward.SANITIZE, mtls), undefined);
  assert.equal(run(Forward.FORWARD_ONLY, mtls), 'By=earlier');
  assert.equal(run(Forward.FORWARD_ONLY, plain), undefined, 'not mTLS: sanitized');
  assert.equal(run(Forward.ALWAYS_FORWARD_ONLY, plain), 'By=earlier');
  assert.equal(run(Forward.APPEND_FORWARD, mtls), `By=earlier,By=${spiffe('server')};Hash=${hash}`);
  assert.equal(
    run(Forward.SANITIZE_SET, mtls, { subject: true, uri: true, dns: true, cert: true }),
    `By=${spiffe('server')};Hash=${hash};Cert="${encodeURIComponent(client.toString())}";Subject="";URI=${spiffe('client')};DNS=client.default.svc`,
  );
  assert.equal(run(Forward.SANITIZE_SET, plain), undefined);
});

function createHashHex(der: Buffer): string {
  return new X509Certificate(der).fingerprint256.replaceAll(':', '').toLowerCase();
}
