// Orchestrator Ingress end to end, with real processes: pilot-discovery reading the stand-in API
// server (--orchconfig, --registries Orchestrator), two `pilot-agent proxy router` gateways whose
// Pods are labelled `mesh: ingressgateway` (one in mesh-system, one in edge), and real HTTP backends.
// An Ingress of the mesh's IngressClass becomes a Gateway in mesh-system and a VirtualService: the
// gateway there routes its host and paths (Prefix by whole segments, Exact exactly, another path
// 404); an Ingress of another class is ignored; an edit moves traffic without a restart; with
// ORCH_INGRESS_NS=edge the Gateway lives in edge: the gateway there gets the routes, the one in
// mesh-system no longer does. The Ingress's status.loadBalancer follows the ingress Service of the
// ingress namespace. PILOT_SCOPE_GATEWAY_TO_NAMESPACE is on: without it a Gateway's
// selector picks gateway proxies of every namespace (as in the Go mesh), and both would route.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../samples/local-mesh.js';
import { close, listen, rawGet } from '../helpers/http.js';
import { discoveryArgs, eventually, Running, start, withProgramOutput } from '../helpers/proc.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { endpointSlice, namespace, node, pod, service, standIn } from '../registry/orch-fixtures.js';

const HOST = 'shop.example.com';

interface GatewayProxy {
  readonly namespace: string;
  readonly port: number;
  readonly running: Running;
}

let api: FakeApiServer;
let kubeconfig: string;
let state: string;
let grpcPort: number;
let discovery: Running;
const backends: Server[] = [];
const gateways: GatewayProxy[] = [];
const ports: Record<string, number> = {};

function backend(app: string): Promise<number> {
  const server = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ app, path: req.url, host: req.headers.host }));
  });
  backends.push(server);
  return listen(server);
}

/** A Service named `name` whose endpoint is the backend on 127.0.0.1. */
function backendObjects(name: string, ns: string, port: number): StoredObject[] {
  return [service(name, ns, [{ name: 'http', port: 80, targetPort: port }]), endpointSlice(name, ns, [{ name: 'http', port }], [{ ip: '127.0.0.1' }])];
}

function ingress(name: string, ns: string, spec: Record<string, unknown>, annotations: Record<string, string> = {}): StoredObject {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'Ingress', metadata: { name, namespace: ns, annotations, creationTimestamp: '2026-01-01T00:00:00Z' }, spec };
}

function shopIngress(apiBackend: string): StoredObject {
  const path = (p: string, pathType: string, svc: string, port: Record<string, unknown>) => ({ path: p, pathType, backend: { service: { name: svc, port } } });
  return ingress('shop', 'shop', {
    ingressClassName: 'mesh',
    rules: [{ host: HOST, http: { paths: [path('/api', 'Prefix', apiBackend, { name: 'http' }), path('/exact', 'Exact', 'web', { number: 80 })] } }],
  });
}

/** The gateway's Pod and its Service (`mesh-ingressgateway`, port 80 to the port the proxy listens on). */
function gatewayObjects(ns: string, ip: string, port: number): StoredObject[] {
  const labels = { mesh: 'ingressgateway' };
  return [
    namespace(ns),
    pod(`gw-${ns}`, ns, ip, labels, { serviceAccount: 'ingressgateway' }),
    service('mesh-ingressgateway', ns, [{ name: 'http', port: 80, targetPort: port }], { selector: labels, externalIPs: [ns === 'edge' ? '192.0.2.20' : '192.0.2.10'] }),
    endpointSlice('mesh-ingressgateway', ns, [{ name: 'http', port }], [{ ip, pod: `gw-${ns}` }]),
  ];
}

function startDiscovery(env: NodeJS.ProcessEnv = {}): Running {
  const args = discoveryArgs(undefined, { orchconfig: kubeconfig, registries: 'Orchestrator', grpcAddr: `127.0.0.1:${grpcPort}` });
  return new Running(start('pilot-discovery', args, { env: { PILOT_USE_ENDPOINT_SLICE: 'true', PILOT_SCOPE_GATEWAY_TO_NAMESPACE: 'true', AUTHORITY_SELF_SIGNED_CA_DIR: join(state, 'ca'), MESHD_CUSTOM_HOST: 'localhost', ...env } }));
}

async function startGateway(ns: string, ip: string): Promise<GatewayProxy> {
  const dir = join(state, `gw-${ns}`);
  mkdirSync(join(dir, 'etc', 'mesh', 'pod'), { recursive: true });
  writeFileSync(join(dir, 'etc', 'mesh', 'pod', 'labels'), 'mesh="ingressgateway"\n');
  const proxyConfig = {
    discoveryAddress: `127.0.0.1:${grpcPort}`,
    proxyAdminPort: await freePort(),
    statusPort: await freePort(),
    metricsPort: 0,
    xdsProxyPort: 0,
    interceptionMode: 'NONE',
    configPath: join(dir, 'proxy'),
    terminationDrainDuration: '1s',
    concurrency: 1,
  };
  const running = new Running(
    start('pilot-agent', ['proxy', 'router'], {
      cwd: dir,
      env: { POD_NAME: `gw-${ns}`, POD_NAMESPACE: ns, INSTANCE_IP: ip, SERVICE_ACCOUNT: 'ingressgateway', PROXY_CONFIG: JSON.stringify(proxyConfig) },
    }),
  );
  return { namespace: ns, port: ports[ns]!, running };
}

const output = () => [discovery, ...gateways.map((g) => g.running)].map((r) => r?.output ?? '').join('\n');

/** A request through the gateway; a refused connection (no listener) is status 0. */
async function viaGateway(gw: GatewayProxy, path: string, host = HOST): Promise<{ status: number; body: string }> {
  return rawGet(gw.port, path, { host }).catch((e: Error) => ({ status: 0, body: e.message }));
}

async function routedTo(gw: GatewayProxy, path: string, app: string): Promise<void> {
  await eventually(async () => {
    const r = await viaGateway(gw, path);
    assert.equal(r.status, 200, `${gw.namespace} ${path}: ${r.status} ${r.body}`);
    assert.deepEqual(JSON.parse(r.body), { app, path, host: HOST });
  }, 60_000);
}

/** The Ingress's status.loadBalancer.ingress as the API server holds it. */
function loadBalancerOf(name: string): unknown {
  return (api.get(ingress(name, 'shop', {}))?.['status'] as { loadBalancer?: { ingress?: unknown } } | undefined)?.loadBalancer?.ingress;
}

before(async () => {
  state = mkdtempSync(join(tmpdir(), 'orch-ingress-'));
  ({ api, kubeconfig } = await standIn(state));
  grpcPort = await freePort();
  ports['mesh-system'] = await freePort();
  ports['edge'] = await freePort();
  const web = await backend('web');
  const web2 = await backend('web2');
  const objects: StoredObject[] = [
    node('node-1', 'eu', 'eu-1a'),
    namespace('shop'),
    ...backendObjects('web', 'shop', web),
    ...backendObjects('web2', 'shop', web2),
    ...gatewayObjects('mesh-system', '127.0.0.2', ports['mesh-system']!),
    ...gatewayObjects('edge', '127.0.0.3', ports['edge']!),
    { apiVersion: 'networking.k8s.io/v1', kind: 'IngressClass', metadata: { name: 'mesh' }, spec: { controller: 'mesh.io/ingress-controller' } },
    shopIngress('web'),
    ingress('other', 'shop', { rules: [{ host: 'other.example.com', http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'web', port: { number: 80 } } } }] } }] }, { 'kubernetes.io/ingress.class': 'nginx' }),
  ];
  for (const o of objects) api.put(o);
  discovery = startDiscovery();
  await discovery.waitFor(/discovery server ready/, 60_000);
  gateways.push(await startGateway('mesh-system', '127.0.0.2'), await startGateway('edge', '127.0.0.3'));
});

after(async () => {
  await Promise.all(gateways.map((g) => g.running.stop()));
  await discovery?.stop();
  await Promise.all(backends.map(close));
  await api?.close();
});

test('the gateway in mesh-system routes the Ingress host: Prefix by whole segments, Exact exactly, other paths 404', async () => {
  const [system] = gateways;
  await withProgramOutput(output, async () => {
    await routedTo(system!, '/api', 'web');
    await routedTo(system!, '/api/items?x=1', 'web');
    await routedTo(system!, '/exact', 'web');
    for (const path of ['/apix', '/exact/more', '/other']) assert.equal((await viaGateway(system!, path)).status, 404, path);
    assert.match(discovery.output, /Ingress translation on \(ingressControllerMode STRICT, class mesh\): Gateways in namespace mesh-system; status\.loadBalancer from Service mesh-system\/mesh-ingressgateway/);
    // The ingress Service's external IP is the Ingress's load balancer address; the other class's Ingress gets none.
    await eventually(() => assert.deepEqual(loadBalancerOf('shop'), [{ ip: '192.0.2.10' }]), 30_000);
    assert.equal(loadBalancerOf('other'), undefined);
  });
});

test('an Ingress of another class is ignored', async () => {
  await withProgramOutput(output, async () => {
    await routedTo(gateways[0]!, '/api', 'web');
    assert.equal((await viaGateway(gateways[0]!, '/', 'other.example.com')).status, 404);
  });
});

test('editing the Ingress moves traffic without a restart; a bad path is reported and the rest keeps working', async () => {
  await withProgramOutput(output, async () => {
    api.put(shopIngress('web2'));
    await routedTo(gateways[0]!, '/api/moved', 'web2');
    const broken = shopIngress('web2');
    const spec = broken.spec as { rules: Array<{ http: { paths: unknown[] } }> };
    spec.rules[0]!.http.paths.push({ path: '/grpc', pathType: 'Prefix', backend: { service: { name: 'web', port: { name: 'grpc' } } } });
    api.put(broken);
    await discovery.waitFor(/Ingress shop\/shop: spec\.rules\[0\]\.http\.paths\[2\]\.backend\.service\.port\.name "grpc" is not a port of service shop\/web/, 30_000);
    await routedTo(gateways[0]!, '/api/still', 'web2');
    assert.equal((await viaGateway(gateways[0]!, '/grpc')).status, 404);
  });
});

test('with ORCH_INGRESS_NS=edge the Gateway lives in edge: its gateway gets the routes, the one in mesh-system no longer does', async () => {
  const [system, edge] = gateways;
  await withProgramOutput(output, async () => {
    assert.equal((await viaGateway(edge!, '/api')).status === 200, false, 'before: no Gateway selects the gateway in edge');
    await discovery.stop();
    discovery = startDiscovery({ ORCH_INGRESS_NS: 'edge' });
    await discovery.waitFor(/Gateways in namespace edge/, 60_000);
    await routedTo(edge!, '/api/edge', 'web2');
    await eventually(() => assert.deepEqual(loadBalancerOf('shop'), [{ ip: '192.0.2.20' }]), 30_000);
    await eventually(async () => {
      const r = await viaGateway(system!, '/api');
      assert.ok(r.status === 0 || r.status === 404, `mesh-system still routes: ${r.status} ${r.body}`);
    }, 60_000);
  });
});
