// CUSTOM authorization end to end: pilot-discovery reads the providers from its mesh config and
// translates a CUSTOM AuthorizationPolicy; pilot-agent's mesh-proxy, in front of the httpbin app,
// asks real external authorizers (HTTP, and gRPC envoy.service.auth.v3.Authorization) running in a
// process of their own (samples/apps/ext-authz.ts), reached through the clusters of their
// ServiceEntries. Switching the policy's provider, or naming
// one that does not exist, applies without a restart.
import { spawn, type ChildProcess } from 'node:child_process';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { rawGet } from '../helpers/http.js';
import { eventually, REPO_ROOT, withProgramOutput } from '../helpers/proc.js';

let mesh: LocalMesh;
let state: string;
let authorizer: ChildProcess | undefined;
let authorizerOutput = '';
let services = '';

/** The checks the authorizer process logged, `check <http|grpc> <method> <path>`. */
const checks = (kind: 'http' | 'grpc') => authorizerOutput.split('\n').filter((l) => l.startsWith(`check ${kind} `));

/** The sample authorizers in a process of their own, as an operator runs one; their ports. */
async function startAuthorizerProcess(): Promise<{ http: number; grpc: number }> {
  authorizer = spawn(process.execPath, [join(REPO_ROOT, 'dist/samples/apps/ext-authz.js'), '0', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  authorizer.stdout!.setEncoding('utf8').on('data', (d: string) => (authorizerOutput += d));
  return eventually(() => {
    const m = /ext-authz http=(\d+) grpc=(\d+)/.exec(authorizerOutput);
    assert.ok(m, 'the authorizer process announces its ports');
    return { http: Number(m[1]), grpc: Number(m[2]) };
  }, 30_000);
}

const inbound = (path: string, headers?: Record<string, string>) => rawGet(mesh.ports.inbound, path, headers);

/** A ServiceEntry naming an authorizer: service port `port`, its one endpoint 127.0.0.1:`target`. */
function authorizerService(name: string, port: number, target: number, protocol: string): string {
  return `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {name: ${name}, namespace: default}
spec:
  hosts: [${name}.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: ${port}, name: ${protocol.toLowerCase()}, protocol: ${protocol}}]
  endpoints: [{address: 127.0.0.1, ports: {${protocol.toLowerCase()}: ${target}}}]
`;
}

const customPolicy = (provider: string) => `apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: ext-authz, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: CUSTOM
  provider: {name: ${provider}}
  rules: [{to: [{operation: {paths: ["/anything/protected*"]}}]}]
`;

function apply(provider: string): void {
  writeFileSync(join(mesh.configDir, '60-ext-authz.yaml'), `${services}---\n${customPolicy(provider)}`);
}

before(async () => {
  state = mkdtempSync(join(tmpdir(), 'mesh-extauthz-'));
  const authz = await startAuthorizerProcess();
  const [httpPort, grpcPort] = [await freePort(), await freePort()];
  services = `${authorizerService('ext-authz', httpPort, authz.http, 'HTTP')}---\n${authorizerService('ext-authz-grpc', grpcPort, authz.grpc, 'GRPC')}`;
  const meshConfig = `extensionProviders:
- name: http-authz
  envoyExtAuthzHttp:
    service: default/ext-authz.default.svc.cluster.local
    port: ${httpPort}
    timeout: 2s
    includeRequestHeadersInCheck: [x-ext-authz]
    headersToUpstreamOnAllow: [x-ext-authz-check-result]
    headersToDownstreamOnDeny: [x-ext-authz-check-result]
    headersToDownstreamOnAllow: [x-ext-authz-to-client]
- name: grpc-authz
  envoyExtAuthzGrpc: {service: ext-authz-grpc.default.svc.cluster.local, port: ${grpcPort}, timeout: 2s}
`;
  mesh = await startLocalMesh({ stateDir: state, ports: await freePorts(), output: 'pipe', proxyConcurrency: 1, meshConfig });
});

after(async () => {
  await mesh?.stop();
  authorizer?.kill();
  rmSync(state, { recursive: true, force: true });
});

const withOutput = (body: () => Promise<void>) => withProgramOutput(() => mesh.output(), body);

test('an HTTP authorizer decides the requests a CUSTOM rule matches; its headers reach the app and the client', { timeout: 120_000 }, () =>
  withOutput(async () => {
    apply('http-authz');
    await eventually(async () => assert.equal((await inbound('/anything/protected', { 'x-ext-authz': 'deny' })).status, 401), 60_000);
    const denied = await inbound('/anything/protected/1', { 'x-ext-authz': 'deny' });
    assert.equal(denied.body, 'denied by ext_authz for /anything/protected/1');
    assert.equal(denied.headers['x-ext-authz-check-result'], 'denied');
    const allowed = await inbound('/anything/protected/2', { 'x-ext-authz': 'allow' });
    assert.equal(allowed.status, 200, allowed.body);
    assert.equal((JSON.parse(allowed.body) as { headers: Record<string, string> }).headers['X-Ext-Authz-Check-Result'], 'allowed', 'headersToUpstreamOnAllow reach the app');
    assert.equal(allowed.headers['x-ext-authz-to-client'], 'allowed', 'headersToDownstreamOnAllow reach the client');
    assert.equal(allowed.headers['x-ext-authz-check-result'], undefined, 'headers not listed for the client do not');
    const before = checks('http').length;
    assert.equal((await inbound('/anything/public', { 'x-ext-authz': 'deny' })).status, 200, 'no CUSTOM rule matches');
    assert.equal(checks('http').length, before, 'the authorizer is not asked');
  }));

test('a gRPC authorizer (Authorization/Check): the policy switched to it applies without a restart', { timeout: 120_000 }, () =>
  withOutput(async () => {
    apply('grpc-authz');
    await eventually(async () => assert.equal((await inbound('/anything/protected/g', { 'x-ext-authz': 'deny' })).body, 'denied by grpc ext_authz for /anything/protected/g'), 60_000);
    const allowed = await inbound('/anything/protected/g', { 'x-ext-authz': 'allow' });
    assert.equal(allowed.status, 200);
    assert.equal(allowed.headers['x-ext-authz-to-client'], 'allowed', "the OK answer's response_headers_to_add reach the client");
    await eventually(() => assert.equal(checks('grpc').at(-1), 'check grpc GET /anything/protected/g'));
  }));

test('a provider the mesh config does not define fails closed: what the CUSTOM rule matches is denied', { timeout: 120_000 }, () =>
  withOutput(async () => {
    apply('no-such-authz');
    await eventually(async () => assert.equal((await inbound('/anything/protected', { 'x-ext-authz': 'allow' })).status, 403), 60_000);
    assert.equal((await inbound('/anything/public')).status, 200);
    assert.match(mesh.output(), /AuthorizationPolicy default\/ext-authz \(CUSTOM\): no ext_authz provider "no-such-authz" in mesh config extensionProviders \(available: grpc-authz, http-authz\)/);
  }));
