// Authorization hardening (issue 11) against real processes: pilot-discovery on a config directory,
// pilot-agent with its mesh-proxy in front of the httpbin app, and the sample issuer. Each case is
// a request a hostile client could send, with the status Envoy and the production mesh give it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

let mesh: LocalMesh;
let issuer: string;
let generation = 0;

const inbound = (path: string, headers?: Record<string, string | string[]>) => rawGet(mesh.ports.inbound, path, headers);
const mint = async (q: string) => (await (await fetch(`${issuer}/token?${q}`)).text()).trim();
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

/**
 * Replaces the test's policies with `yaml` plus a marker DENY on a path of this generation, and
 * waits until the proxy enforces the marker: then the rest of the new config is in force too. The
 * old policies are removed first (and that seen), so that an old ALLOW cannot fake the marker.
 */
async function apply(yaml: string): Promise<void> {
  const file = join(mesh.configDir, '50-hardening.yaml');
  rmSync(file, { force: true });
  await eventually(async () => assert.equal((await inbound('/headers')).status, 200, 'no policy left in force'), 60_000);
  generation++;
  const marker = `/status/2${String(generation).padStart(2, '0')}`;
  const markerPolicy = [
    'apiVersion: security.mesh.io/v1beta1',
    'kind: AuthorizationPolicy',
    'metadata: {name: marker, namespace: default}',
    'spec:',
    '  selector: {matchLabels: {app: httpbin}}',
    '  action: DENY',
    `  rules: [{to: [{operation: {paths: ["${marker}"]}}]}]`,
  ].join('\n');
  writeFileSync(file, `${yaml.replaceAll('ISSUER', issuer)}\n---\n${markerPolicy}\n`);
  await eventually(async () => assert.equal((await inbound(marker)).status, 403, `marker ${marker} in force`), 60_000);
}

before(async () => {
  const state = mkdtempSync(join(tmpdir(), 'mesh-authz-'));
  // One proxy worker: a config change then reaches every request at once (with several, each
  // worker applies it on its own schedule and the marker could be seen before the rest).
  mesh = await startLocalMesh({ stateDir: state, issuer: true, ports: await freePorts(), output: 'pipe', proxyConcurrency: 1 });
  issuer = mesh.issuerUrl!;
});

after(async () => {
  await mesh?.stop();
});

/** Runs `body`; on failure, the programs' output is appended to the message. */
async function withOutput(body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (e) {
    (e as Error).message += `\n--- mesh output ---\n${mesh.output().slice(-4000)}`;
    throw e;
  }
}

const TWO_ISSUERS = `
apiVersion: security.mesh.io/v1beta1
kind: RequestAuthentication
metadata: {name: two-issuers, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  jwtRules:
  - {issuer: "ISSUER", jwksUri: "ISSUER/.well-known/jwks.json"}
  - {issuer: "ISSUER/tenant-b", jwksUri: "ISSUER/.well-known/jwks.json"}
`;

test('requestPrincipals: split at the last "/", no issuer impersonates another', { timeout: 120_000 }, () =>
  withOutput(async () => {
    await apply(`${TWO_ISSUERS}---
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: principals, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: ALLOW
  rules:
  - from: [{source: {requestPrincipals: ["ISSUER/tenant-b/alice"]}}]
  - from: [{source: {requestPrincipals: ["ISSUER/*"]}}]
    to: [{operation: {paths: ["/anything/a-only"]}}]
  - from: [{source: {requestPrincipals: ["ISSUER/*ice"]}}]
    to: [{operation: {paths: ["/anything/literal"]}}]
`);
    const tenantB = `${issuer}/tenant-b`;
    assert.equal((await inbound('/headers', bearer(await mint(`iss=${encodeURIComponent(tenantB)}&sub=alice`)))).status, 200, 'tenant-b alice');
    // Issuer A minting sub "tenant-b/alice" is not tenant-b's alice.
    assert.equal((await inbound('/headers', bearer(await mint('sub=tenant-b/alice')))).status, 403, 'issuer A impersonating tenant-b/alice');
    assert.equal((await inbound('/anything/a-only', bearer(await mint('sub=bob')))).status, 200, 'ISSUER/* admits issuer A');
    assert.equal((await inbound('/anything/a-only', bearer(await mint(`iss=${encodeURIComponent(tenantB)}&sub=bob`)))).status, 403, 'ISSUER/* does not admit ISSUER/tenant-b');
    assert.equal((await inbound('/anything/literal', bearer(await mint('sub=alice')))).status, 403, '"*ice" inside the value is a literal');
    assert.equal((await inbound('/anything/literal', bearer(await mint('sub=*ice')))).status, 200, 'the literal "*ice" subject');
  }));

test('paths are normalized before RBAC, and the upstream gets the normalized path', { timeout: 120_000 }, () =>
  withOutput(async () => {
    await apply(`
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: deny-paths, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/headers", "/anything/secret*"]}}]}]
`);
    const denied = ['/headers', '/./headers', '/anything/../headers', '/%2e/headers', '/%2E%2E/headers', '/anything/./secret/data', '/anything/x/../secret/data', '/anything/%73ecret/data', '/anything\\..\\headers'];
    for (const path of denied) assert.equal((await inbound(path)).status, 403, path);
    const echoed = await inbound('/anything/a/./b/../c%7e?q=/../x');
    assert.equal(echoed.status, 200, echoed.body);
    assert.equal((JSON.parse(echoed.body) as { url: string }).url, '/anything/a/c~?q=/../x', 'the upstream sees the normalized path, query untouched');
    assert.equal((await inbound('/anything/public')).status, 200);
  }));

test('token extraction as Envoy: the first token is the identity; extraction stops at whitespace and padding', { timeout: 120_000 }, () =>
  withOutput(async () => {
    await apply(`
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: alice-only, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: ALLOW
  rules: [{from: [{source: {requestPrincipals: ["ISSUER/alice"]}}]}]
`);
    const alice = await mint('sub=alice');
    const mallory = await mint('sub=mallory');
    assert.equal((await inbound('/headers', bearer(alice))).status, 200, 'alice');
    assert.equal((await inbound('/headers', { authorization: [`Bearer ${mallory}`, `Bearer ${alice}`] })).status, 403, '[mallory, alice]: mallory is the identity');
    assert.equal((await inbound('/headers', { authorization: [`Bearer ${alice}`, `Bearer ${mallory}`] })).status, 200, '[alice, mallory]: alice is the identity');
    assert.equal((await inbound(`/headers?access_token=${alice}`, bearer(mallory))).status, 403, 'header mallory, parameter alice');
    assert.equal((await inbound(`/headers?access_token=${mallory}`, bearer(alice))).status, 200, 'header alice, parameter mallory');
    assert.equal((await inbound('/headers', { authorization: [`Bearer ${alice}`, 'Bearer not-a-jwt'] })).status, 401, 'every token must verify');
    assert.equal((await inbound('/headers', { authorization: `Bearer ${alice} ${mallory}` })).status, 200, 'the token stops at whitespace');
    assert.equal((await inbound('/headers', { authorization: `Bearer ${alice}==` })).status, 200, 'the token stops at = padding');
  }));

test('path templates: {*} is one segment, {**} any number, in a DENY', { timeout: 120_000 }, () =>
  withOutput(async () => {
    await apply(`
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: deny-templates, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/anything/admin/{*}", "/anything/files/{**}"]}}]}]
`);
    for (const path of ['/anything/admin/users', '/anything/files/', '/anything/files/a/b', '/anything/admin/./users', '/anything/x/../admin/users']) {
      assert.equal((await inbound(path)).status, 403, path);
    }
    for (const path of ['/anything/admin', '/anything/admin/users/1', '/anything/admin/%7B*%7D', '/anything/files']) {
      assert.equal((await inbound(path)).status, 200, path);
    }
  }));

test('space-delimited claims: scope and permission always, others when the rule names them', { timeout: 120_000 }, () =>
  withOutput(async () => {
    const requireJwt = join(mesh.configDir, '01-require-jwt.yaml');
    const original = readFileSync(requireJwt, 'utf8');
    writeFileSync(requireJwt, original.replace(/jwksUri: (.*)$/m, 'jwksUri: $1\n    spaceDelimitedClaims: ["roles"]'));
    try {
      await apply(`
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: deny-claims, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules:
  - when: [{key: "request.auth.claims[scope]", values: ["admin"]}]
  - when: [{key: "request.auth.claims[permission]", values: ["delete"]}]
  - when: [{key: "request.auth.claims[roles]", values: ["root"]}]
  - when: [{key: "request.auth.claims[team]", values: ["red"]}]
`);
      const status = async (claims: string) => (await inbound('/headers', bearer(await mint(`sub=alice&${claims}`)))).status;
      assert.equal(await status('claim.scope=read%20admin'), 403, 'scope "read admin" holds admin');
      assert.equal(await status('claim.scope=read%20write'), 200, 'scope "read write"');
      assert.equal(await status('claim.permission=read%20%20delete'), 403, 'permission "read  delete" holds delete');
      // The edited RequestAuthentication is another file: it may reach the proxy in a later push.
      await eventually(async () => assert.equal(await status('claim.roles=dev%20root'), 403, 'roles, named by the rule, "dev root" holds root'), 60_000);
      // A claim no rule names stays one string.
      assert.equal(await status('claim.team=blue%20red'), 200, 'team "blue red" is not a list');
      assert.equal(await status('claim.team=red'), 403, 'team "red"');
    } finally {
      writeFileSync(requireJwt, original);
    }
  }));

test('dry-run: a policy annotated mesh.io/dry-run is evaluated and counted, never enforced', { timeout: 120_000 }, () =>
  withOutput(async () => {
    await apply(`
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: deny-headers-dry-run
  namespace: default
  annotations: {"mesh.io/dry-run": "true"}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/headers"]}}]}]
`);
    const shadowDenied = async () => {
      const stats = await (await fetch(`http://127.0.0.1:${mesh.ports.admin}/stats`)).text();
      return stats.split('\n').filter((l) => /\.rbac\.mesh_dry_run_deny_shadow_denied: /.test(l)).reduce((n, l) => n + Number(l.split(': ')[1]), 0);
    };
    const before = await shadowDenied();
    assert.equal((await inbound('/headers')).status, 200, 'the dry-run DENY does not deny');
    assert.equal((await inbound('/headers')).status, 200);
    assert.equal(await shadowDenied(), before + 2, 'each request it would deny is counted');
  }));
