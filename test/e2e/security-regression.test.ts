// Security regression suite: hostile paths, tokens and headers against real processes
// (pilot-discovery, pilot-agent + mesh-proxy, httpbin, the sample issuer), each row with the
// status Envoy and the production mesh give the request under the policies below.
import { before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CompactSign, generateKeyPair, importJWK } from 'jose';

type SigningKey = Awaited<ReturnType<typeof importJWK>>;
import { freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { loadOrCreateKey, type IssuerKey } from '../../samples/apps/issuer.js';
import { rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

// DENY: /headers, /anything/secret*, one segment under /anything/admin/, and /anything/scoped* for
// tokens whose scope holds admin. ALLOW: /anything/alice* only for the principal ISSUER/alice,
// everything else for anyone.
const POLICIES = `
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: regression-deny, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules:
  - to: [{operation: {paths: ["/headers", "/anything/secret*", "/anything/admin/{*}"]}}]
  - to: [{operation: {paths: ["/anything/scoped*"]}}]
    when: [{key: "request.auth.claims[scope]", values: ["admin"]}]
---
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: regression-allow, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: ALLOW
  rules:
  - to: [{operation: {notPaths: ["/anything/alice*"]}}]
  - from: [{source: {requestPrincipals: ["ISSUER/alice"]}}]
    to: [{operation: {paths: ["/anything/alice*"]}}]
`;

let mesh: LocalMesh;
let issuer: string;
let key: IssuerKey;
let signingKey: SigningKey;
let strangerKey: SigningKey;

async function send(path: string, headers: Record<string, string | string[]> = {}): Promise<number> {
  return (await rawGet(mesh.ports.inbound, path, headers)).status;
}

/** A token signed with the issuer's key (or `with`), header and payload exactly as given. */
async function sign(payload: Record<string, unknown>, header: Record<string, unknown> = {}, withKey?: SigningKey): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const body = { iss: issuer, sub: 'alice', iat: now, exp: now + 3600, ...payload };
  return new CompactSign(Buffer.from(JSON.stringify(body)))
    .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: 'JWT', ...header })
    .sign(withKey ?? signingKey);
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

interface Case {
  readonly name: string;
  readonly path: string;
  readonly headers?: () => Promise<Record<string, string | string[]>>;
  readonly status: number;
}

const alice = () => sign({});
const mallory = () => sign({ sub: 'mallory' });
const withToken = (t: () => Promise<string>) => async () => bearer(await t());

const CASES: Case[] = [
  // Paths: every spelling of a denied path is denied (normalize_path, BASE).
  { name: 'denied path', path: '/headers', status: 403 },
  { name: 'dot segment', path: '/./headers', status: 403 },
  { name: 'dot-dot segment', path: '/anything/../headers', status: 403 },
  { name: 'escaped dot', path: '/%2e/headers', status: 403 },
  { name: 'escaped dot-dot, upper case', path: '/%2E%2E/headers', status: 403 },
  { name: 'escaped dot-dot, mixed case', path: '/%2e%2E/headers', status: 403 },
  { name: 'dot-dot above the root', path: '/../../headers', status: 403 },
  { name: 'escaped dot-dots above the root', path: '/%2e%2e/%2e%2e/headers', status: 403 },
  { name: 'backslash dot-dot', path: '/anything\\..\\headers', status: 403 },
  { name: 'query string', path: '/headers?x=1', status: 403 },
  { name: 'query that looks like a path', path: '/headers?/anything', status: 403 },
  { name: 'fragment', path: '/headers#/anything', status: 403 },
  { name: 'prefix rule, exact', path: '/anything/secret', status: 403 },
  { name: 'prefix rule, longer', path: '/anything/secretive', status: 403 },
  { name: 'prefix rule, dot segment', path: '/anything/./secret/data', status: 403 },
  { name: 'prefix rule, dot-dot', path: '/anything/x/../secret/data', status: 403 },
  { name: 'prefix rule, escaped unreserved letter', path: '/anything/%73ecret/data', status: 403 },
  { name: 'prefix rule, all letters escaped', path: '/anything/%73%65%63%72%65%74', status: 403 },
  { name: 'prefix rule, lower-case hex escape', path: '/anything/secr%65t', status: 403 },
  { name: 'prefix rule, escaped slash kept (KEEP_UNCHANGED)', path: '/anything/secret%2Fdata', status: 403 },
  { name: 'escaped slash does not create a segment', path: '/anything/..%2Fheaders', status: 200 },
  { name: 'path match is case-sensitive', path: '/anything/Secret', status: 200 },
  { name: 'double slash is not merged under BASE (as Envoy)', path: '/anything//secret', status: 200 },
  { name: 'unrelated path', path: '/anything/public', status: 200 },
  // Path templates.
  { name: 'template {*}', path: '/anything/admin/users', status: 403 },
  { name: 'template {*}, escaped letter', path: '/anything/admin/%75sers', status: 403 },
  { name: 'template {*}, dot segment', path: '/anything/admin/./users', status: 403 },
  { name: 'template {*}, dot-dot into it', path: '/anything/x/../admin/users', status: 403 },
  { name: 'template {*}, query', path: '/anything/admin/users?a=b', status: 403 },
  { name: 'template {*} is one segment', path: '/anything/admin/users/1', status: 200 },
  { name: 'template {*} needs a segment', path: '/anything/admin/', status: 200 },
  { name: 'template {*} is below the prefix, not the prefix itself', path: '/anything/admin', status: 200 },
  // Tokens on a path only alice may use.
  { name: 'no token', path: '/anything/alice', status: 403 },
  { name: 'alice', path: '/anything/alice', headers: withToken(alice), status: 200 },
  { name: 'another subject', path: '/anything/alice', headers: withToken(mallory), status: 403 },
  { name: 'subject with the principal as suffix', path: '/anything/alice', headers: withToken(() => sign({ sub: 'x/alice' })), status: 403 },
  { name: 'issuer carrying the subject', path: '/anything/alice', headers: withToken(() => sign({ iss: `${issuer}/alice`, sub: '' })), status: 401 },
  { name: 'unknown issuer', path: '/anything/alice', headers: withToken(() => sign({ iss: 'https://evil.example' })), status: 401 },
  { name: 'not a JWT', path: '/anything/alice', headers: async () => bearer('not-a-jwt'), status: 401 },
  { name: 'two parts', path: '/anything/alice', headers: async () => bearer(`${b64({ alg: 'RS256' })}.${b64({ sub: 'alice' })}`), status: 401 },
  { name: 'alg none', path: '/anything/alice', headers: async () => bearer(`${b64({ alg: 'none', typ: 'JWT' })}.${b64({ iss: issuer, sub: 'alice' })}.`), status: 401 },
  { name: 'alg HS256 with the public key as secret', path: '/anything/alice', headers: async () => {
    const t = await alice();
    return bearer(`${b64({ alg: 'HS256', kid: key.kid })}.${t.split('.')[1]}.${t.split('.')[2]}`);
  }, status: 401 },
  { name: 'signed by another key, same kid', path: '/anything/alice', headers: withToken(() => sign({}, {}, strangerKey)), status: 401 },
  { name: 'payload swapped under a valid signature', path: '/anything/alice', headers: async () => {
    const [h, , s] = (await mallory()).split('.');
    return bearer(`${h}.${(await alice()).split('.')[1]}.${s}`);
  }, status: 401 },
  { name: 'truncated signature', path: '/anything/alice', headers: async () => bearer((await alice()).slice(0, -10)), status: 401 },
  { name: 'unknown kid', path: '/anything/alice', headers: withToken(() => sign({}, { kid: 'no-such-kid' })), status: 401 },
  { name: 'expired', path: '/anything/alice', headers: withToken(() => sign({ exp: Math.floor(Date.now() / 1000) - 600 })), status: 401 },
  { name: 'not yet valid', path: '/anything/alice', headers: withToken(() => sign({ nbf: Math.floor(Date.now() / 1000) + 600 })), status: 401 },
  { name: 'exp beyond 2^64', path: '/anything/alice', headers: withToken(() => sign({ exp: 1e300 })), status: 401 },
  { name: 'exp as a string', path: '/anything/alice', headers: withToken(() => sign({ exp: '9999999999' })), status: 401 },
  { name: 'negative exp', path: '/anything/alice', headers: withToken(() => sign({ exp: -1 })), status: 401 },
  { name: 'nbf beyond 2^64', path: '/anything/alice', headers: withToken(() => sign({ nbf: 1e300 })), status: 401 },
  { name: 'sub not a string', path: '/anything/alice', headers: withToken(() => sign({ sub: ['alice'] })), status: 401 },
  { name: 'iss not a string', path: '/anything/alice', headers: withToken(() => sign({ iss: [issuer] })), status: 401 },
  // Several tokens: every one must verify, the first is the identity.
  { name: 'two Authorization values, mallory first', path: '/anything/alice', headers: async () => ({ authorization: [`Bearer ${await mallory()}`, `Bearer ${await alice()}`] }), status: 403 },
  { name: 'two Authorization values, alice first', path: '/anything/alice', headers: async () => ({ authorization: [`Bearer ${await alice()}`, `Bearer ${await mallory()}`] }), status: 200 },
  { name: 'a valid and a forged token', path: '/anything/alice', headers: async () => ({ authorization: [`Bearer ${await alice()}`, 'Bearer a.b.c'] }), status: 401 },
  { name: 'header mallory, access_token alice', path: `/anything/alice?access_token=ALICE`, headers: withToken(mallory), status: 403 },
  { name: 'access_token alone', path: '/anything/alice?access_token=ALICE', status: 200 },
  { name: 'two tokens in one value: the first counts', path: '/anything/alice', headers: async () => ({ authorization: `Bearer ${await alice()} ${await mallory()}` }), status: 200 },
  { name: 'trailing padding', path: '/anything/alice', headers: async () => ({ authorization: `Bearer ${await alice()}==` }), status: 200 },
  { name: 'extra spaces after the prefix', path: '/anything/alice', headers: async () => ({ authorization: `Bearer    ${await alice()}` }), status: 200 },
  { name: 'lower-case prefix is not Bearer', path: '/anything/alice', headers: async () => ({ authorization: `bearer ${await alice()}` }), status: 403 },
  { name: 'another scheme', path: '/anything/alice', headers: async () => ({ authorization: `Token ${await alice()}` }), status: 403 },
  { name: 'token in another header', path: '/anything/alice', headers: async () => ({ 'x-jwt': await alice() }), status: 403 },
  // Claims: scope is a space-delimited list.
  { name: 'scope "read admin" holds admin', path: '/anything/scoped', headers: withToken(() => sign({ scope: 'read admin' })), status: 403 },
  { name: 'scope list holds admin', path: '/anything/scoped', headers: withToken(() => sign({ scope: ['read', 'admin'] })), status: 403 },
  { name: 'scope "read write"', path: '/anything/scoped', headers: withToken(() => sign({ scope: 'read write' })), status: 200 },
  { name: 'scope is case-sensitive', path: '/anything/scoped', headers: withToken(() => sign({ scope: 'ADMIN' })), status: 200 },
  { name: 'scope "administrator" is not admin', path: '/anything/scoped', headers: withToken(() => sign({ scope: 'administrator' })), status: 200 },
  // Spoofed identity headers are not identity.
  { name: 'forged jwt payload header', path: '/anything/alice', headers: async () => ({ 'x-jwt-payload': b64({ iss: issuer, sub: 'alice' }) }), status: 403 },
  { name: 'forged client certificate header', path: '/anything/alice', headers: async () => ({ 'x-forwarded-client-cert': `By=spiffe://cluster.local/ns/default/sa/x;URI=${issuer}/alice` }), status: 403 },
];

before(async () => {
  const state = mkdtempSync(join(tmpdir(), 'mesh-regression-'));
  mesh = await startLocalMesh({ stateDir: state, issuer: true, ports: await freePorts(), output: 'pipe', proxyConcurrency: 1 });
  issuer = mesh.issuerUrl!;
  key = await loadOrCreateKey(join(state, 'issuer-key.json'));
  signingKey = await importJWK(key.privateJwk, 'RS256');
  strangerKey = (await generateKeyPair('RS256')).privateKey;
  writeFileSync(join(mesh.configDir, '50-regression.yaml'), POLICIES.replaceAll('ISSUER', issuer));
  // The policies are in force once alice's path needs a token.
  await eventually(async () => assert.equal(await send('/anything/alice'), 403), 60_000);
});

after(async () => {
  await mesh?.stop();
});

test(`security regression: ${CASES.length} hostile requests get Envoy's status`, { timeout: 180_000 }, async () => {
  assert.ok(CASES.length >= 60);
  const failures: string[] = [];
  const aliceToken = await alice();
  for (const c of CASES) {
    const status = await send(c.path.replace('ALICE', aliceToken), c.headers ? await c.headers() : {});
    if (status !== c.status) failures.push(`${c.name} (${c.path}): got ${status}, want ${c.status}`);
  }
  assert.deepEqual(failures, [], `${failures.length} of ${CASES.length} cases differ\n--- mesh output ---\n${failures.length ? mesh.output().slice(-3000) : ''}`);
});
