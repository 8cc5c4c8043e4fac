// AuthorizationPolicy path templates ({*}, {**}) -> Envoy's uri_template matcher, and the proxy's
// evaluation of it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { authz, onlyPolicy, rbacAllows, rbacJson } from './fixtures.js';

function denyPaths(paths: string[], notPaths?: string[]) {
  return buildRbacFilters([authz('p', { action: 'DENY', rules: [{ to: [{ operation: { paths, ...(notPaths ? { notPaths } : {}) } }] }] })]);
}

test('{*} and {**} become uri_template permissions, as the production mesh emits them', () => {
  const { filters, warnings } = denyPaths(['/admin/{*}', '/{**}/secret', '/plain/*']);
  assert.deepEqual(warnings, []);
  const template = (pathTemplate: string) => ({
    uri_template: { name: 'uri-template', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig', path_template: pathTemplate } },
  });
  assert.deepEqual(onlyPolicy(rbacJson(filters[0]!.config)), {
    permissions: [{ and_rules: { rules: [{ and_rules: { rules: [{ or_rules: { rules: [template('/admin/*'), template('/**/secret'), { url_path: { path: { prefix: '/plain/' } } }] } }] } }] } }],
    principals: [{ any: true }],
  });
});

test('a DENY on a template denies what it matches: {*} one segment, {**} zero or more', () => {
  const config = denyPaths(['/admin/{*}', '/files/{**}', '/{*}/internal/{**}']).filters[0]!.config;
  const allowed = (path: string) => rbacAllows(config, { path });
  for (const path of ['/admin/users', '/admin/users?x=1', '/files/', '/files/a/b/c', '/v1/internal/', '/v2/internal/x/y']) assert.equal(allowed(path), false, path);
  for (const path of ['/admin', '/admin/', '/admin/users/1', '/files', '/internal/x', '/a/b/internal/x', '/admin/{*}x']) assert.equal(allowed(path), true, path);
});

test('notPaths templates: everything but the template', () => {
  const config = denyPaths([], ['/public/{**}']).filters[0]!.config;
  assert.equal(rbacAllows(config, { path: '/public/a/b' }), true);
  assert.equal(rbacAllows(config, { path: '/private/a' }), false);
});

test('an invalid template is a warning naming it, and fails closed', () => {
  const deny = denyPaths(['/a/{**}/b/{*}', '/x/{*}y']);
  assert.equal(deny.warnings.length, 1);
  assert.match(deny.warnings[0]!, /rules\[0\]\.to\[0\]\.operation\.paths: .*"\/a\/\{\*\*\}\/b\/\{\*\}".*last operator.*field ignored/);
  // DENY: the bad field is dropped, so the rule denies every path.
  assert.equal(rbacAllows(deny.filters[0]!.config, { path: '/anything' }), false);
  const allow = buildRbacFilters([authz('p', { rules: [{ to: [{ operation: { paths: ['/x/{*}y'] } }] }] })]);
  assert.match(allow.warnings[0]!, /segment "\{\*\}y"/);
  assert.equal(rbacAllows(allow.filters[0]!.config, { path: '/x/ay' }), false);
});
