// The RBAC path index never changes a decision: the indexed evaluation finds the same first
// matching policy as a full scan (explain), over many policies and request paths.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { compileRbacEngine } from '../../src/envoy/rbac.js';
import { requestView } from '../../src/envoy/request.js';
import type { AuthorizationPolicy, Rule } from '../../src/api/types.js';

function policy(rules: Rule[]): AuthorizationPolicy {
  return { apiVersion: 'security.mesh.io/v1beta1', kind: 'AuthorizationPolicy', metadata: { name: 'p', namespace: 'ns' }, spec: { action: 'ALLOW', rules } };
}

test('indexed evaluation = full scan, with exact, prefix, suffix, template, notPaths and path-free rules', () => {
  const rules: Rule[] = [];
  for (let i = 0; i < 300; i++) {
    const kind = i % 7;
    const paths =
      kind === 0 ? [`/a/${i}`] : kind === 1 ? [`/a/${i}/*`] : kind === 2 ? [`*/${i}.txt`] : kind === 3 ? [`/t/{*}/${i}`] : kind === 4 ? [`/a/${i}`, `/b/${i % 10}*`] : [];
    const operation = kind === 5 ? { notPaths: [`/a/${i}`] } : kind === 6 ? { methods: ['POST'] } : { paths };
    rules.push({ to: [{ operation }], from: [{ source: { requestPrincipals: [`iss/u${i % 13}`] } }] });
  }
  const engine = compileRbacEngine(buildRbacFilters([policy(rules)]).filters[0]!.config.rules!);
  const paths = ['/a/7', '/a/8/x', '/a/15', '/x/14.txt', '/t/q/3', '/b/33', '/b/3', '/a/1', '/a/1?q=/a/2', '/', '/a/', '/zzz'];
  let matched = 0;
  for (const path of paths) {
    for (const method of ['GET', 'POST']) {
      for (let u = 0; u < 13; u++) {
        const req = requestView({ path, method, metadata: { 'envoy.filters.http.jwt_authn': { jwt_payload: { iss: 'iss', sub: `u${u}` } } } });
        const fast = engine.evaluate(req);
        const full = engine.explain(req);
        assert.equal(fast.matchedPolicy, full.matchedPolicy, `${method} ${path} u${u}`);
        assert.equal(fast.allowed, full.allowed);
        if (fast.matchedPolicy) matched++;
      }
    }
  }
  assert.ok(matched > 50, 'the cases exercise matches, not only misses');
});
