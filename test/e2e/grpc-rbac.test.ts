// The independent check of the AuthorizationPolicy -> RBAC translation: an unmodified xDS-enabled
// @grpc/grpc-js-xds server, whose RBAC HTTP filter is gRPC's own implementation of Envoy's RBAC,
// gets its server listener from the real discovery server (policy files in a config dir, selection,
// builders, serverHttpFilters wiring) and answers PERMISSION_DENIED exactly where the policies deny,
// for paths, methods and headers. /debug/authz_explain, which runs our data plane's filters, agrees
// with it on every call, and an edit of the policy file reaches the server without a restart.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
// An xDS-enabled gRPC server cannot bind port 0, so it gets a free port picked beforehand.
import { freePort } from '../../samples/local-mesh.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, credentials, Metadata, ServerCredentials, status, type ServiceError } from '@grpc/grpc-js';
import { setScopeLevel } from '../../src/common/log.js';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { eventually } from '../helpers/proc.js';
import { localDiscoveryOptions } from '../security/fixtures.js';

// grpc-js-xds reads this when it loads: without it, a listener with an RBAC filter is refused.
process.env.GRPC_XDS_EXPERIMENTAL_RBAC = 'true';
const { register: registerGrpcXds, XdsServer: GrpcXdsServer } = await import('@grpc/grpc-js-xds');
registerGrpcXds();
for (const s of ['ads', 'default', 'model', 'authn']) setScopeLevel(s, 'error');

const BOOTSTRAP_OPTION = 'grpc.TEST_ONLY_DO_NOT_USE_IN_PROD.xds_bootstrap_config';
const SERVICE = '/mesh.test.Echo/';
const METHODS = ['Echo', 'Admin', 'Secret'] as const;
const identity = (b: Buffer): Buffer => b;
const echoService = Object.fromEntries(
  METHODS.map((m) => [m, { path: `${SERVICE}${m}`, requestStream: false, responseStream: false, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity }]),
);
const handlers = Object.fromEntries(METHODS.map((m) => [m, (_call: unknown, cb: (err: null, res: Buffer) => void) => cb(null, Buffer.from(m))]));

function policies(secretMethods: string): string {
  return `apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: echo-allow, namespace: foo }
spec:
  selector: { matchLabels: { app: echo } }
  action: ALLOW
  rules:
  - to: [{ operation: { paths: ["${SERVICE}Echo"], methods: ["POST"] } }]
  - to: [{ operation: { paths: ["${SERVICE}Admin"] } }]
    when: [{ key: "request.headers[x-role]", values: ["admin", "root*"] }]
  - to: [{ operation: { paths: ["${SERVICE}Sec*"], methods: [${secretMethods}] } }]
---
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: echo-deny, namespace: foo }
spec:
  selector: { matchLabels: { app: echo } }
  action: DENY
  rules:
  - to: [{ operation: { paths: ["${SERVICE}*"] } }]
    when: [{ key: "request.headers[x-blocked]", values: ["*"] }]
---
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: other-workload, namespace: foo }
spec:
  selector: { matchLabels: { app: not-echo } }
  action: DENY
  rules: [{}]
`;
}

async function discovery(t: TestContext, configDir: string): Promise<DiscoveryServer> {
  const d = new DiscoveryServer(localDiscoveryOptions(configDir));
  t.after(() => d.stop());
  await d.start();
  return d;
}

/** The gRPC status of one call on a fresh connection (a listener update applies to new connections). */
async function callStatus(port: number, method: string, headers: Record<string, string> = {}): Promise<status> {
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  const md = new Metadata();
  for (const [k, v] of Object.entries(headers)) md.set(k, v);
  try {
    return await new Promise<status>((resolve) =>
      client.makeUnaryRequest(`${SERVICE}${method}`, identity, identity, Buffer.from('hi'), md, (err: ServiceError | null) => resolve(err ? err.code : status.OK)),
    );
  } finally {
    client.close();
  }
}

interface Case {
  readonly method: string;
  readonly headers?: Record<string, string>;
  readonly expected: status;
}

const CASES: readonly Case[] = [
  { method: 'Echo', expected: status.OK },
  { method: 'Echo', headers: { 'x-blocked': 'yes' }, expected: status.PERMISSION_DENIED },
  { method: 'Admin', expected: status.PERMISSION_DENIED },
  { method: 'Admin', headers: { 'x-role': 'admin' }, expected: status.OK },
  { method: 'Admin', headers: { 'x-role': 'rootish' }, expected: status.OK },
  { method: 'Admin', headers: { 'x-role': 'user' }, expected: status.PERMISSION_DENIED },
  { method: 'Admin', headers: { 'x-role': 'admin', 'x-blocked': '1' }, expected: status.PERMISSION_DENIED },
  { method: 'Secret', expected: status.PERMISSION_DENIED },
];

// The timeout only bounds a hang (a listener the server never accepts); nothing asserts on time.
test('an xDS-enabled gRPC server enforces the translated AuthorizationPolicies; explain agrees', { timeout: 60_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'grpc-rbac-'));
  const policyFile = join(dir, 'policies.yaml');
  writeFileSync(policyFile, policies('"GET"'));
  const d = await discovery(t, dir);

  const proxyID = 'sidecar~127.0.0.1~echo-1.foo~foo.svc.cluster.local';
  const bootstrap = JSON.stringify({
    xds_servers: [{ server_uri: d.addresses.grpc, channel_creds: [{ type: 'insecure' }], server_features: ['xds_v3'] }],
    server_listener_resource_name_template: 'xds.mesh.io/grpc/lds/inbound/%s',
    node: { id: proxyID, metadata: { GENERATOR: 'grpc', NAMESPACE: 'foo', LABELS: { app: 'echo' } }, locality: {} },
  });
  const server = new GrpcXdsServer({ [BOOTSTRAP_OPTION]: bootstrap });
  server.addService(echoService, handlers);
  t.after(() => server.forceShutdown());
  const port = await freePort();
  // The callback comes once the server has received and accepted its listener (with the filters).
  await new Promise<void>((resolve, reject) => server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));

  const explain = async (c: Case): Promise<{ status: number; because: string }> => {
    const res = await fetch(`http://${d.addresses.http}/debug/authz_explain`, {
      method: 'POST',
      body: JSON.stringify({ proxyID, method: 'POST', path: `${SERVICE}${c.method}`, headers: c.headers ?? {} }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as { status: number; because: string };
  };

  for (const c of CASES) {
    const label = `${c.method} ${JSON.stringify(c.headers ?? {})}`;
    assert.equal(await callStatus(port, c.method, c.headers), c.expected, `gRPC server: ${label}`);
    const ex = await explain(c);
    assert.equal(ex.status, c.expected === status.OK ? 200 : 403, `explain agrees with the gRPC server on ${label}: ${ex.because}`);
  }

  // The policy is edited in place: Secret is allowed for POST (every gRPC call) from the next push on.
  writeFileSync(policyFile, policies('"POST"'));
  await eventually(async () => assert.equal(await callStatus(port, 'Secret'), status.OK, 'the edited policy reached the gRPC server'), 20_000);
  assert.equal(await callStatus(port, 'Admin'), status.PERMISSION_DENIED, 'the rest of the policy still holds');
  assert.equal((await explain({ method: 'Secret', expected: status.OK })).status, 200);
});
