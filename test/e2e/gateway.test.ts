// An ingress gateway end to end, with real processes: pilot-discovery on a config directory, the
// sample httpbin behind its sidecar, and `pilot-agent proxy router` (the local mesh's `--gateway`)
// running mesh-proxy as a gateway. A request with the Gateway's host reaches the app through the
// VirtualService bound to the Gateway; another host gets 404; editing the VirtualService moves the
// host to a second app without restarting anything; a broken edit keeps the last good route; a
// server with httpsRedirect answers 301 to https; a route match naming one Gateway applies there only.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { close, listen, rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

let mesh: LocalMesh;
let v2: Server;
let v2Port: number;

const viaGateway = (host: string, path = '/headers') => rawGet(mesh.ports.gateway, path, { host });

before(async () => {
  v2 = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ app: 'v2', path: req.url, host: req.headers.host }));
  });
  v2Port = await listen(v2);
  const state = mkdtempSync(join(tmpdir(), 'mesh-gateway-'));
  mesh = await startLocalMesh({ stateDir: state, gateway: true, ports: await freePorts(), output: 'pipe', proxyConcurrency: 1 });
  writeFileSync(
    join(mesh.configDir, 'v2.yaml'),
    [
      'apiVersion: networking.mesh.io/v1',
      'kind: ServiceEntry',
      'metadata: {name: echo-v2, namespace: default}',
      'spec:',
      '  hosts: [echo-v2.default.svc.cluster.local]',
      '  location: MESH_INTERNAL',
      '  resolution: STATIC',
      '  ports: [{number: 9081, name: http, protocol: HTTP}]',
      `  endpoints: [{address: 127.0.0.1, ports: {http: ${v2Port}}}]`,
    ].join('\n'),
  );
});

after(async () => {
  await mesh?.stop();
  if (v2) await close(v2);
});

test('the gateway routes the Gateway host to the app through the bound VirtualService', async () => {
  const res = await eventually(async () => {
    const r = await viaGateway('httpbin.example.com');
    assert.equal(r.status, 200, `${r.status} ${r.body}`);
    return r;
  }, 60_000);
  const headers = (JSON.parse(res.body) as { headers: Record<string, string> }).headers;
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  assert.equal(lower['host'], 'httpbin.example.com', 'the Host the client sent reaches the app');
  assert.equal(lower['x-forwarded-for'], '127.0.0.1', 'the gateway is the edge: it appends the client address');
  assert.equal((await viaGateway('httpbin.example.com:80')).status, 200, 'the port in the Host header is ignored, as in the Go mesh');
});

test('a host no server and VirtualService of the gateway name gets 404', async () => {
  assert.equal((await viaGateway('other.example.com')).status, 404);
});

test('editing the VirtualService moves the host to another service without a restart; a broken edit keeps the last good route', async () => {
  const file = join(mesh.configDir, 'ingress.yaml');
  const original = readFileSync(file, 'utf8');
  assert.match(original, /host: httpbin\n/);
  writeFileSync(file, original.replace(/host: httpbin\n/, 'host: echo-v2\n'));
  const moved = await eventually(async () => {
    const r = await viaGateway('httpbin.example.com', '/moved');
    assert.equal(r.status, 200, `${r.status} ${r.body}`);
    const body = JSON.parse(r.body) as { app?: string };
    assert.equal(body.app, 'v2');
    return body;
  }, 60_000);
  assert.deepEqual(moved, { app: 'v2', path: '/moved', host: 'httpbin.example.com' });

  // hosts must be a list: the file is refused when read, naming the field.
  writeFileSync(file, original.replace(/hosts: \[\s*"httpbin\.example\.com"\s*\]/, 'hosts: httpbin.example.com').replace(/host: httpbin\n/, 'host: echo-v2\n'));
  await eventually(() => assert.match(mesh.output(), /ingress\.yaml[^\n]*hosts/), 60_000);
  // The rejected file does not take the route away: the gateway still sends the host to v2.
  for (let i = 0; i < 5; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const r = await viaGateway('httpbin.example.com', '/still');
    assert.equal(r.status, 200, `${r.status} ${r.body}`);
    assert.equal((JSON.parse(r.body) as { app?: string }).app, 'v2');
  }
  writeFileSync(file, original);
  await eventually(async () => assert.ok('headers' in (JSON.parse((await viaGateway('httpbin.example.com')).body) as object), 'httpbin answers through the gateway'), 60_000);
});

test('a server with httpsRedirect answers plaintext requests for its hosts with a 301 to https', async () => {
  const port = await freePort();
  writeFileSync(
    join(mesh.configDir, 'redirect.yaml'),
    [
      'apiVersion: networking.mesh.io/v1',
      'kind: Gateway',
      'metadata: {name: redirect, namespace: mesh-system}',
      'spec:',
      '  selector: {app: ingressgateway}',
      `  servers: [{port: {number: ${port}, name: http-redirect, protocol: HTTP}, hosts: [secure.example.com], tls: {httpsRedirect: true}}]`,
    ].join('\n'),
  );
  const res = await eventually(async () => {
    const r = await rawGet(port, '/login?next=%2F', { host: 'secure.example.com' });
    assert.equal(r.status, 301, `${r.status} ${r.body}`);
    return r;
  }, 60_000);
  assert.equal(res.headers.location, 'https://secure.example.com/login?next=%2F');
  assert.equal((await rawGet(port, '/', { host: 'other.example.com' })).status, 404, 'hosts of no server are not redirected');
});

test('a route match naming one Gateway applies on that Gateway only', async () => {
  const [publicPort, partnersPort] = [await freePort(), await freePort()];
  const server = (name: string, port: number) => [
    'apiVersion: networking.mesh.io/v1',
    'kind: Gateway',
    `metadata: {name: ${name}, namespace: mesh-system}`,
    'spec:',
    '  selector: {app: ingressgateway}',
    `  servers: [{port: {number: ${port}, name: http, protocol: HTTP}, hosts: [default/split.example.com]}]`,
  ];
  writeFileSync(
    join(mesh.configDir, 'match-gateways.yaml'),
    [
      ...server('public', publicPort),
      '---',
      ...server('partners', partnersPort),
      '---',
      'apiVersion: networking.mesh.io/v1',
      'kind: VirtualService',
      'metadata: {name: split, namespace: default}',
      'spec:',
      '  hosts: [split.example.com]',
      '  gateways: [mesh-system/public, mesh-system/partners]',
      '  http:',
      '  - match: [{headers: {x-tier: {exact: gold}}, gateways: [mesh-system/partners]}]',
      '    route: [{destination: {host: echo-v2}}]',
      '  - route: [{destination: {host: httpbin}}]',
    ].join('\n'),
  );
  const viaPartners = await eventually(async () => {
    const r = await rawGet(partnersPort, '/headers', { host: 'split.example.com', 'x-tier': 'gold' });
    assert.equal(r.status, 200, `${r.status} ${r.body}`);
    return JSON.parse(r.body) as { app?: string };
  }, 60_000);
  assert.equal(viaPartners.app, 'v2', 'the partners Gateway applies the match naming it');
  const viaPublic = await eventually(async () => {
    const r = await rawGet(publicPort, '/headers', { host: 'split.example.com', 'x-tier': 'gold' });
    assert.equal(r.status, 200, `${r.status} ${r.body}`);
    return JSON.parse(r.body) as { app?: string; headers?: object };
  }, 60_000);
  assert.equal(viaPublic.app, undefined, 'the public Gateway skips the match: httpbin answers');
  assert.ok(viaPublic.headers);
});
