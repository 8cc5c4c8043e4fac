// pilot-discovery --plugins: names checked, and what leaving each out does to the translation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parsePlugins, pluginNotices, PluginsError, securityOptions } from '../../src/security/plugins.js';
import { parseExtensionProviders } from '../../src/model/extension-providers.js';
import { buildWorkloadSecurity } from '../../src/security/filters.js';
import { FAIL_CLOSED_JWKS } from '../../src/envoy/jwks.js';
import { authz, reqAuthn } from './fixtures.js';

const providers = parseExtensionProviders([{ name: 'opa', envoyExtAuthzHttp: { service: 'opa.foo.svc.cluster.local', port: 8181 } }]);
const policies = [
  authz('ext', { action: 'CUSTOM', provider: { name: 'opa' }, rules: [{}] }),
  authz('deny', { action: 'DENY', rules: [{ to: [{ operation: { methods: ['DELETE'] } }] }] }),
];
const authns = [reqAuthn('jwt', { jwtRules: [{ issuer: 'iss', jwks: '{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}' }] })];
const build = (names: string[]) => buildWorkloadSecurity({ namespace: 'foo', labels: {} }, authns, policies, () => FAIL_CLOSED_JWKS, undefined, securityOptions(parsePlugins(names), providers, () => true));

test('--plugins: unknown names are refused, naming them; the default enables everything', () => {
  assert.throws(() => parsePlugins(['authz', 'mixer']), (e: unknown) => e instanceof PluginsError && /invalid argument "mixer" for "--plugins" flag: expected some of ext_authz, authn, authz/.test(e.message));
  assert.deepEqual(pluginNotices(parsePlugins(['ext_authz', 'authn', 'authz'])), []);
  const all = build(['ext_authz', 'authn', 'authz']);
  assert.ok(all.jwtAuthn);
  assert.deepEqual(all.rbac.map((f) => [f.action, f.extAuthz?.provider]), [['CUSTOM', 'opa'], ['DENY', undefined]]);
});

test('--plugins without ext_authz: CUSTOM rules deny (never dropped); without authz: only CUSTOM; without authn: no jwt_authn', () => {
  const noExt = build(['authn', 'authz']);
  assert.equal(noExt.rbac[0]!.extAuthz, undefined);
  assert.deepEqual(Object.keys(noExt.rbac[0]!.config.rules?.policies ?? {}), ['mesh-ext-authz-opa-ns[foo]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action']);
  assert.match(noExt.warnings.join('\n'), /the ext_authz plugin is not enabled \(pilot-discovery --plugins\)/);
  assert.deepEqual(build(['ext_authz', 'authn']).rbac.map((f) => f.action), ['CUSTOM']);
  assert.equal(build(['ext_authz', 'authz']).jwtAuthn, null);
  assert.equal(pluginNotices(parsePlugins([])).length, 3, 'each plugin left out is announced');
});
