// The discovery server's security wiring, in process: /debug/authz_explain verifies a posted token
// with the keys the resolver fetched (through the data plane's jwt_authn), and once no
// RequestAuthentication references a jwksUri any more, the resolver stops fetching it; JwksService
// on the xDS gRPC port refetches a trusted issuer for an unknown kid, at most once per cooldown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { JwksRefreshClient } from '../../src/envoy/jwks-service.js';
import { setScopeLevel } from '../../src/common/log.js';
import { eventually } from '../helpers/proc.js';
import { localDiscoveryOptions } from './fixtures.js';

for (const s of ['default', 'ads', 'model', 'authn', 'jwt', 'source', 'validationServer']) setScopeLevel(s, 'error');

test('explain verifies posted tokens with the fetched keys; a jwksUri no policy references is dropped', { timeout: 30_000 }, async (t) => {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  const body = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' }] });
  const issuer = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body));
  await new Promise<void>((r) => issuer.listen(0, '127.0.0.1', r));
  t.after(() => issuer.close());
  const jwksUri = `http://127.0.0.1:${(issuer.address() as AddressInfo).port}/jwks`;

  const dir = mkdtempSync(join(tmpdir(), 'discovery-security-'));
  const file = join(dir, 'ra.yaml');
  writeFileSync(
    file,
    `apiVersion: security.mesh.io/v1beta1
kind: RequestAuthentication
metadata: { name: jwt, namespace: foo }
spec:
  selector: { matchLabels: { app: httpbin } }
  jwtRules: [{ issuer: "https://issuer.test", jwksUri: "${jwksUri}" }]
`,
  );
  const d = new DiscoveryServer(localDiscoveryOptions(dir));
  t.after(() => d.stop());
  await d.start();

  const explain = async (token: string) => {
    const res = await fetch(`http://${d.addresses.http}/debug/authz_explain`, {
      method: 'POST',
      body: JSON.stringify({ namespace: 'foo', labels: { app: 'httpbin' }, method: 'GET', path: '/headers', token }),
    });
    assert.equal(res.status, 200);
    return (await res.json()) as { status: number; stage: string; because: string; trace: string[]; selected: string[] };
  };
  const token = await new SignJWT({ iss: 'https://issuer.test', sub: 'alice' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setExpirationTime('1h').sign(privateKey);
  // The first explain makes the resolver fetch the issuer; until then the key set fails closed.
  await eventually(async () => {
    const ok = await explain(token);
    assert.equal(ok.status, 200, `verified once the keys are fetched: ${ok.because}`);
    assert.match(ok.trace[0]!, /token verified, issuer "https:\/\/issuer\.test", subject "alice"/);
  }, 10_000);
  const tampered = await explain(`${token.slice(0, -4)}AAAA`);
  assert.deepEqual([tampered.status, tampered.stage], [401, 'jwt_authn']);
  assert.match(tampered.because, /Jwt verification fails/);
  const bad = await fetch(`http://${d.addresses.http}/debug/authz_explain`, { method: 'POST', body: JSON.stringify({ namespace: 'foo', destinationPort: 'x' }) });
  assert.equal(bad.status, 400);
  assert.match(await bad.text(), /destinationPort must be a port number/);
  assert.deepEqual(d.resolver.uris(), [jwksUri]);

  unlinkSync(file);
  await eventually(() => assert.deepEqual(d.resolver.uris(), [], 'the resolver forgot the jwksUri of the deleted policy'), 10_000);
});

test('JwksService refetches a trusted issuer for an unknown kid, once per cooldown; other issuers never', { timeout: 30_000 }, async (t) => {
  const keys = [await exportJWK((await generateKeyPair('ES256')).publicKey)].map((k) => ({ ...k, kid: 'k1', alg: 'ES256' }));
  let fetches = 0;
  const issuer = createServer((_req, res) => {
    fetches++;
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys }));
  });
  await new Promise<void>((r) => issuer.listen(0, '127.0.0.1', r));
  t.after(() => issuer.close());
  const jwksUri = `http://127.0.0.1:${(issuer.address() as AddressInfo).port}/jwks`;
  const dir = mkdtempSync(join(tmpdir(), 'discovery-jwks-service-'));
  writeFileSync(
    join(dir, 'ra.yaml'),
    `apiVersion: security.mesh.io/v1beta1
kind: RequestAuthentication
metadata: { name: jwt, namespace: foo }
spec:
  jwtRules: [{ issuer: "https://issuer.test", jwksUri: "${jwksUri}" }, { issuer: "https://inline.test", jwks: '${JSON.stringify({ keys })}' }]
`,
  );
  const d = new DiscoveryServer(localDiscoveryOptions(dir));
  t.after(() => d.stop());
  await d.start();
  const client = new JwksRefreshClient(d.addresses.grpc!);
  t.after(() => client.close());
  await eventually(() => assert.equal(fetches, 1, 'the first fetch starts with the server (readiness does not wait for it)'));

  const untrusted = await client.requestRefresh('https://attacker.test', 'k9');
  assert.deepEqual(untrusted, { accepted: false, reason: 'no RequestAuthentication trusts this issuer' });
  const inline = await client.requestRefresh('https://inline.test', 'k9');
  assert.deepEqual([inline.accepted, inline.reason], [false, 'no jwksUri is fetched for this issuer']);
  const known = await client.requestRefresh('https://issuer.test', 'k1');
  assert.deepEqual([known.accepted, known.reason], [false, 'the kid is already in the key set']);
  assert.equal(fetches, 1, 'refused requests fetch nothing');

  // The issuer rotates: k2 signs from now on.
  keys.push({ ...(await exportJWK((await generateKeyPair('ES256')).publicKey)), kid: 'k2', alg: 'ES256' });
  assert.deepEqual(await client.requestRefresh('https://issuer.test', 'k2'), { accepted: true, reason: 'refetch started' });
  await eventually(() => assert.deepEqual(d.resolver.status(jwksUri)?.kids, ['k1', 'k2']), 10_000);
  assert.equal(fetches, 2);

  // A flood of forged kids within the cooldown: refused, no fetch.
  const flood = await Promise.all(Array.from({ length: 100 }, (_, i) => client.requestRefresh('https://issuer.test', `forged-${i}`)));
  assert.equal(flood.filter((v) => v.accepted).length, 0);
  assert.match(flood[0]!.reason, /cooldown 60000ms/);
  await d.resolver.idle();
  assert.equal(fetches, 2, 'the flood cost the issuer nothing');
});

test('mesh config rootNamespace: its policies are mesh-wide; under the default root (mesh-system) that namespace is an ordinary one', { timeout: 30_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'discovery-root-'));
  const denyAll = (namespace: string) => `apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: deny-all, namespace: ${namespace} }
spec: { action: DENY, rules: [{}] }
`;
  writeFileSync(join(dir, 'corp.yaml'), denyAll('corp-mesh'));
  const explain = async (d: DiscoveryServer) => {
    const res = await fetch(`http://${d.addresses.http}/debug/authz_explain`, { method: 'POST', body: JSON.stringify({ namespace: 'foo', labels: { app: 'httpbin' }, method: 'GET', path: '/' }) });
    return (await res.json()) as { status: number; selected: string[] };
  };
  const corp = new DiscoveryServer({ ...localDiscoveryOptions(dir), rootNamespace: 'corp-mesh' });
  t.after(() => corp.stop());
  await corp.start();
  await eventually(async () => {
    const denied = await explain(corp);
    assert.deepEqual([denied.status, denied.selected], [403, ['AuthorizationPolicy/corp-mesh/deny-all']], 'the root namespace policy selects every workload');
  }, 10_000);

  const dflt = new DiscoveryServer(localDiscoveryOptions(dir));
  t.after(() => dflt.stop());
  await dflt.start();
  const open = await explain(dflt);
  assert.equal(open.status, 200, 'under the default root namespace, corp-mesh is an ordinary namespace');
  assert.deepEqual(open.selected, []);
});
