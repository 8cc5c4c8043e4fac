// /debug/authz_explain for dry-run and CUSTOM policies: what the shadow rules would decide, beside
// (never instead of) the enforced decision; and which provider a CUSTOM policy sends the request to.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { explain } from '../../src/security/explain.js';
import { buildWorkloadSecurity, type SecurityOptions } from '../../src/security/filters.js';
import { authorizerLookup } from '../../src/security/authz/ext-authz.js';
import { parseExtensionProviders } from '../../src/model/extension-providers.js';
import { FAIL_CLOSED_JWKS } from '../../src/envoy/jwks.js';
import type { AuthorizationPolicy } from '../../src/api/types.js';
import { authz } from './fixtures.js';

const options: SecurityOptions = {
  authorizers: authorizerLookup(parseExtensionProviders([{ name: 'opa', envoyExtAuthzGrpc: { service: 'opa.foo.svc.cluster.local', port: 9191 } }]), () => true),
};
const security = (policies: AuthorizationPolicy[]) => buildWorkloadSecurity({ namespace: 'foo', labels: {} }, [], policies, () => FAIL_CLOSED_JWKS, undefined, options);
const dryRun = (p: AuthorizationPolicy): AuthorizationPolicy => ({ ...p, metadata: { ...p.metadata, annotations: { 'mesh.io/dry-run': 'true' } } });
const paths = (...p: string[]) => [{ to: [{ operation: { paths: p } }] }];

test('a dry-run DENY is reported as what it would decide; the enforced decision ignores it', async () => {
  const sec = security([dryRun(authz('trial-deny', { action: 'DENY', rules: paths('/admin*') })), authz('allow-all', { rules: [{}] })]);
  const hit = await explain(sec, { method: 'GET', path: '/admin/users' });
  assert.equal(hit.status, 200, 'dry-run never enforces');
  assert.equal(hit.decision, 'allow');
  assert.deepEqual(hit.shadow?.map((s) => [s.action, s.result, s.policy?.name, s.policy?.rule]), [['DENY', 'denied', 'trial-deny', 0]]);
  assert.match(hit.shadow![0]!.because, /to\[0\]\.operation\.paths holds: path = "\/admin\/users"/);
  assert.ok(hit.trace.some((t) => /dry-run, not enforced\): would be denied/.test(t)));
  const miss = await explain(sec, { method: 'GET', path: '/public' });
  assert.equal(miss.shadow?.[0]?.result, 'allowed');
  assert.match(miss.shadow![0]!.because, /no dry-run DENY rule matched/);
});

test('a dry-run ALLOW beside an enforced DENY: both reported, each in its own field', async () => {
  const sec = security([dryRun(authz('trial-allow', { rules: paths('/api*') })), authz('deny-secret', { action: 'DENY', rules: paths('/api/secret') })]);
  const r = await explain(sec, { method: 'GET', path: '/api/secret' });
  assert.equal(r.status, 403);
  assert.equal(r.policy?.name, 'deny-secret');
  assert.deepEqual(r.shadow?.map((s) => [s.action, s.result, s.policy?.name, s.reached]), [['ALLOW', 'allowed', 'trial-allow', false]], 'reported although the DENY ends the request before the proxy evaluates it');
  const other = await explain(sec, { method: 'GET', path: '/other' });
  assert.equal(other.status, 200, 'the dry-run ALLOW does not deny what it does not match');
  assert.equal(other.shadow?.[0]?.result, 'denied');
  assert.equal(other.shadow?.[0]?.reached, true);
});

test('CUSTOM: the provider is asked only when a CUSTOM rule matches, and the rest of the chain still explains', async () => {
  const sec = security([authz('ext', { action: 'CUSTOM', provider: { name: 'opa' }, rules: paths('/protected*') }), authz('deny-delete', { action: 'DENY', rules: [{ to: [{ operation: { methods: ['DELETE'] } }] }] })]);
  const asked = await explain(sec, { method: 'GET', path: '/protected/x' });
  assert.equal(asked.extAuthz?.provider, 'opa');
  assert.equal(asked.extAuthz?.asked, true);
  assert.equal(asked.extAuthz?.policy?.name, 'ext');
  assert.equal(asked.status, 200, 'if the provider allows, nothing else denies');
  const deleted = await explain(sec, { method: 'DELETE', path: '/protected/x' });
  assert.equal(deleted.extAuthz?.asked, true);
  assert.equal(deleted.status, 403, 'an allowing provider does not lift the DENY that follows');
  const notAsked = await explain(sec, { method: 'GET', path: '/public' });
  assert.equal(notAsked.extAuthz?.asked, false);
  assert.match(notAsked.extAuthz!.because, /not sent to provider "opa": no CUSTOM rule matched/);
});

test('CUSTOM with an unknown provider: explained as the DENY it becomes', async () => {
  const sec = security([authz('ext', { action: 'CUSTOM', provider: { name: 'missing' }, rules: paths('/protected*') })]);
  const r = await explain(sec, { method: 'GET', path: '/protected' });
  assert.equal(r.status, 403);
  assert.equal(r.action, 'CUSTOM');
  assert.equal(r.policy?.name, 'ext', 'the renamed -deny-due-to-bad-CUSTOM-action policy maps back to the AuthorizationPolicy');
  assert.equal(r.extAuthz, undefined);
});
