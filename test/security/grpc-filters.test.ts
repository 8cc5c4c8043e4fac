// The HTTP filters of a proxyless gRPC server: rbac only (gRPC has no jwt_authn), no AUDIT filter
// (gRPC refuses the LOG action), one unique name per filter (gRPC refuses duplicates), and notes
// naming what is not enforced there.
import { test } from 'node:test';
import { authorizerLookup } from '../../src/security/authz/ext-authz.js';
import { parseExtensionProviders } from '../../src/model/extension-providers.js';
import assert from 'node:assert/strict';
import { anyUnpack } from '@bufbuild/protobuf/wkt';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RBAC_Action } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { buildWorkloadSecurity, grpcServerHttpFilters, securityHttpFilters } from '../../src/security/filters.js';
import { FAIL_CLOSED_JWKS } from '../../src/envoy/jwks.js';
import { authz, reqAuthn } from './fixtures.js';

const WORKLOAD = { namespace: 'foo', labels: { app: 'echo' } };

test('gRPC server filters: CUSTOM, DENY, ALLOW rbac filters with unique names; no jwt_authn, no AUDIT', () => {
  const sec = buildWorkloadSecurity(
    WORKLOAD,
    [reqAuthn('jwt', { jwtRules: [{ issuer: 'iss', jwksUri: 'http://jwks' }] })],
    ['ALLOW', 'DENY', 'AUDIT', 'CUSTOM'].map((action) => authz(action.toLowerCase(), { action: action as 'ALLOW', rules: [{}] })),
    () => FAIL_CLOSED_JWKS,
  );
  assert.deepEqual(securityHttpFilters(sec).map((f) => f.name), ['envoy.filters.http.jwt_authn', ...Array(4).fill('envoy.filters.http.rbac')], 'the sidecar gets all five');
  const { filters, notes } = grpcServerHttpFilters(sec);
  assert.deepEqual(filters.map((f) => f.name), ['envoy.filters.http.rbac.custom', 'envoy.filters.http.rbac.deny', 'envoy.filters.http.rbac.allow']);
  const actions = filters.map((f) => (f.configType.case === 'typedConfig' ? anyUnpack(f.configType.value, RBACSchema)?.rules?.action : undefined));
  assert.deepEqual(actions, [RBAC_Action.DENY, RBAC_Action.DENY, RBAC_Action.ALLOW]);
  assert.equal(notes.length, 2);
  assert.match(notes[0]!, /RequestAuthentication foo\/jwt is not enforced on a proxyless gRPC server/);
  assert.match(notes[1]!, /AUDIT .*LOG/);
});

test('gRPC server filters: nothing selects the workload, nothing to send or say', () => {
  const sec = buildWorkloadSecurity(WORKLOAD, [], [authz('elsewhere', { rules: [{}] }, 'bar')], () => FAIL_CLOSED_JWKS);
  assert.deepEqual(grpcServerHttpFilters(sec), { filters: [], notes: [] });
});

test('gRPC server filters: a CUSTOM pair becomes a DENY of what its rules match (no ext_authz in gRPC); dry-run CUSTOM is left out', () => {
  const authorizers = authorizerLookup(parseExtensionProviders([{ name: 'opa', envoyExtAuthzGrpc: { service: 'opa.foo.svc.cluster.local', port: 9191 } }]), () => true);
  const custom = authz('ext', { action: 'CUSTOM', provider: { name: 'opa' }, rules: [{ to: [{ operation: { paths: ['/admin'] } }] }] });
  const trial = { ...authz('trial', { action: 'CUSTOM', provider: { name: 'opa' }, rules: [{}] }), metadata: { name: 'trial', namespace: 'foo', annotations: { 'mesh.io/dry-run': 'true' } } };
  const sec = buildWorkloadSecurity(WORKLOAD, [], [custom, trial], () => FAIL_CLOSED_JWKS, undefined, { authorizers });
  assert.deepEqual(securityHttpFilters(sec).map((f) => f.name), ['envoy.filters.http.rbac', 'envoy.filters.http.rbac', 'envoy.filters.http.ext_authz'], 'the sidecar asks the provider');
  const { filters, notes } = grpcServerHttpFilters(sec);
  assert.deepEqual(filters.map((f) => f.name), ['envoy.filters.http.rbac.custom']);
  const rules = filters[0]!.configType.case === 'typedConfig' ? anyUnpack(filters[0]!.configType.value, RBACSchema)?.rules : undefined;
  assert.equal(rules?.action, RBAC_Action.DENY);
  assert.deepEqual(Object.keys(rules?.policies ?? {}), ['mesh-ext-authz-opa-ns[foo]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action']);
  assert.match(notes.join('\n'), /dry-run CUSTOM .* not sent to a proxyless gRPC server/);
  assert.match(notes.join('\n'), /CUSTOM AuthorizationPolicies \(provider "opa"\) are enforced as DENY on a proxyless gRPC server/);
});
