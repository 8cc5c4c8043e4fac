// Mesh mTLS pieces the goldens do not spell out: PeerAuthentication resolution corner cases, what a
// client infers about a namespace, trust domain aliases in SAN lists and AuthorizationPolicy
// principals, and the RBAC a source.principals rule becomes (authenticated peers only).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AuthorizationPolicy, PeerAuthentication, PeerAuthenticationSpec } from '../../src/api/types.js';
import { namespaceMtlsMode, portMtlsMode, workloadMtls } from '../../src/security/mtls/peer-authentication.js';
import { expandWithAliases, policyWithAliases, principalsWithAliases, trustDomainsForValidation } from '../../src/security/mtls/trust-domain.js';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';

const pa = (namespace: string, name: string, spec: PeerAuthenticationSpec, creationTimestamp?: string): PeerAuthentication => ({
  apiVersion: 'security.mesh.io/v1',
  kind: 'PeerAuthentication',
  metadata: { namespace, name, ...(creationTimestamp ? { creationTimestamp } : {}) },
  spec,
});
const ROOT = 'mesh-system';
const app = { namespace: 'foo', labels: { app: 'a' } };

test('no policy: PERMISSIVE everywhere; UNSET at every level inherits down to the mesh default', () => {
  assert.deepEqual(workloadMtls(app, [], ROOT), { mode: 'PERMISSIVE', ports: {}, from: [] });
  const m = workloadMtls(app, [pa(ROOT, 'm', { mtls: { mode: 'UNSET' } }), pa('foo', 'n', {}), pa('foo', 'w', { selector: { matchLabels: { app: 'a' } }, portLevelMtls: { '80': { mode: 'UNSET' } } })], ROOT);
  assert.deepEqual(m, { mode: 'PERMISSIVE', ports: { 80: 'PERMISSIVE' }, from: ['mesh-system/m', 'foo/n', 'foo/w'] });
});

test('the workload level beats the namespace, which beats the mesh; port level beats the workload', () => {
  const all = [pa(ROOT, 'm', { mtls: { mode: 'DISABLE' } }), pa('foo', 'n', { mtls: { mode: 'STRICT' } }), pa('foo', 'w', { selector: { matchLabels: { app: 'a' } }, mtls: { mode: 'PERMISSIVE' }, portLevelMtls: { '8080': { mode: 'DISABLE' } } })];
  const m = workloadMtls(app, all, ROOT);
  assert.equal(portMtlsMode(m, 9000), 'PERMISSIVE');
  assert.equal(portMtlsMode(m, 8080), 'DISABLE');
  // Another workload in foo only gets the namespace's mode; a workload elsewhere the mesh's.
  assert.equal(workloadMtls({ namespace: 'foo', labels: { app: 'b' } }, all, ROOT).mode, 'STRICT');
  assert.equal(workloadMtls({ namespace: 'bar', labels: { app: 'a' } }, all, ROOT).mode, 'DISABLE');
});

test('selector policies of another namespace (the root one included) never select a workload', () => {
  const m = workloadMtls(app, [pa(ROOT, 'sel', { selector: { matchLabels: { app: 'a' } }, mtls: { mode: 'STRICT' } }), pa('bar', 'sel', { selector: { matchLabels: { app: 'a' } }, mtls: { mode: 'STRICT' } })], ROOT);
  assert.equal(m.mode, 'PERMISSIVE');
});

test('of two policies at one level the oldest decides; without timestamps, the first by name', () => {
  const older = pa('foo', 'z', { mtls: { mode: 'STRICT' } }, '2026-01-01T00:00:00Z');
  const newer = pa('foo', 'a', { mtls: { mode: 'DISABLE' } }, '2026-03-01T00:00:00Z');
  assert.equal(workloadMtls(app, [newer, older], ROOT).mode, 'STRICT');
  assert.equal(workloadMtls(app, [pa('foo', 'b', { mtls: { mode: 'STRICT' } }), pa('foo', 'a', { mtls: { mode: 'DISABLE' } })], ROOT).mode, 'DISABLE');
});

test('clients infer a namespace mode from the namespace-wide, else the mesh-wide policy, ignoring workload policies', () => {
  const all = [pa(ROOT, 'm', { mtls: { mode: 'STRICT' } }), pa('bar', 'n', { mtls: { mode: 'DISABLE' } }), pa('foo', 'w', { selector: { matchLabels: { app: 'a' } }, mtls: { mode: 'DISABLE' } })];
  assert.equal(namespaceMtlsMode('foo', all, ROOT), 'STRICT');
  assert.equal(namespaceMtlsMode('bar', all, ROOT), 'DISABLE');
  assert.equal(namespaceMtlsMode('baz', [], ROOT), 'PERMISSIVE');
});

const TD = { trustDomain: 'td.example', aliases: ['old.example'], skipValidation: false };

test('trust domains: servers accept the domain and its aliases, or any with PILOT_SKIP_VALIDATE_TRUST_DOMAIN', () => {
  assert.deepEqual(trustDomainsForValidation(TD), ['td.example', 'old.example']);
  assert.deepEqual(trustDomainsForValidation({ ...TD, skipValidation: true }), []);
  assert.deepEqual(expandWithAliases(['spiffe://td.example/ns/foo/sa/a', 'dns-name'], ['old.example']), ['spiffe://td.example/ns/foo/sa/a', 'dns-name', 'spiffe://old.example/ns/foo/sa/a']);
});

test('principals of the trust domain, an alias or cluster.local match under each; *, other forms and foreign domains stay', () => {
  assert.deepEqual(principalsWithAliases('td.example/ns/foo/sa/a', TD), ['td.example/ns/foo/sa/a', 'old.example/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('old.example/ns/foo/sa/a', TD), ['td.example/ns/foo/sa/a', 'old.example/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('cluster.local/ns/foo/sa/a', TD), ['td.example/ns/foo/sa/a', 'old.example/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('*/ns/foo/sa/a', TD), ['*/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('*', TD), ['*']);
  assert.deepEqual(principalsWithAliases('other.example/ns/foo/sa/a', TD), ['other.example/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('td.example/ns/foo/sa/a', { ...TD, aliases: [] }), ['td.example/ns/foo/sa/a']);
  // Without aliases too (the Go mesh's MigrateTrustDomain): cluster.local names the mesh's own trust domain.
  assert.deepEqual(principalsWithAliases('cluster.local/ns/foo/sa/a', { ...TD, aliases: [] }), ['td.example/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('cluster.local/ns/foo/sa/a', { ...TD, trustDomain: 'cluster.local', aliases: [] }), ['cluster.local/ns/foo/sa/a']);
});

test('trust domain patterns in principals, as the Go mesh: a pattern matching a domain becomes the domains; *x stays for those it covers', () => {
  const renamed = { trustDomain: 'east-mesh', aliases: ['west-mesh', 'legacy.example'], skipValidation: false };
  // `*-mesh` covers east-mesh and west-mesh: kept once for both, and legacy.example gets its own.
  assert.deepEqual(principalsWithAliases('*-mesh/ns/foo/sa/a', renamed), ['*-mesh/ns/foo/sa/a', 'legacy.example/ns/foo/sa/a']);
  // `west-*` covers west-mesh: a prefix is not kept, every trust domain gets an exact principal.
  assert.deepEqual(principalsWithAliases('west-*/ns/foo/sa/a', renamed), ['east-mesh/ns/foo/sa/a', 'west-mesh/ns/foo/sa/a', 'legacy.example/ns/foo/sa/a']);
  // A pattern covering none of them is foreign: kept as written.
  assert.deepEqual(principalsWithAliases('*.corp/ns/foo/sa/a', renamed), ['*.corp/ns/foo/sa/a']);
  // In a plain cluster.local mesh a prefix naming it becomes it, so it cannot match a foreign `clu...` domain.
  const local = { trustDomain: 'cluster.local', aliases: [], skipValidation: false };
  assert.deepEqual(principalsWithAliases('clu*/ns/foo/sa/a', local), ['cluster.local/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('*.local/ns/foo/sa/a', local), ['*.local/ns/foo/sa/a']);
  assert.deepEqual(principalsWithAliases('/ns/foo/sa/a', renamed), ['/ns/foo/sa/a'], 'an empty trust domain is no pattern');
  const policy: AuthorizationPolicy = { apiVersion: 'security.mesh.io/v1', kind: 'AuthorizationPolicy', metadata: { namespace: 'foo', name: 'p' }, spec: { rules: [{ from: [{ source: { principals: ['clu*/ns/foo/sa/a'] } }] }] } };
  const json = JSON.stringify(toEnvoyJson(RBACSchema, buildRbacFilters([policyWithAliases(policy, local)]).filters[0]!.config));
  assert.ok(json.includes('"principal_name":{"exact":"spiffe://cluster.local/ns/foo/sa/a"}') && !json.includes('prefix'), json);
  assert.equal(policyWithAliases({ ...policy, spec: { rules: [{ from: [{ source: { principals: ['cluster.local/ns/foo/sa/a'] } }] }] } }, local).spec.rules![0]!.from![0]!.source.principals![0], 'cluster.local/ns/foo/sa/a');
});

test('source.principals become authenticated principal matchers on the peer certificate, aliases included', () => {
  const policy: AuthorizationPolicy = {
    apiVersion: 'security.mesh.io/v1',
    kind: 'AuthorizationPolicy',
    metadata: { namespace: 'foo', name: 'p' },
    spec: { rules: [{ from: [{ source: { principals: ['td.example/ns/foo/sa/a'], notPrincipals: ['old.example/ns/foo/sa/b'] } }], when: [{ key: 'source.principal', values: ['cluster.local/ns/foo/sa/c'] }] }] },
  };
  const { filters } = buildRbacFilters([policyWithAliases(policy, TD)]);
  const json = JSON.stringify(toEnvoyJson(RBACSchema, filters[0]!.config));
  for (const id of ['td.example/ns/foo/sa/a', 'old.example/ns/foo/sa/a', 'td.example/ns/foo/sa/b', 'old.example/ns/foo/sa/b', 'td.example/ns/foo/sa/c', 'old.example/ns/foo/sa/c']) {
    assert.ok(json.includes(`"authenticated":{"principal_name":{"exact":"spiffe://${id}"}}`), `${id} in ${json}`);
  }
  assert.ok(!json.includes('cluster.local'), 'cluster.local is replaced by the trust domains');
});
