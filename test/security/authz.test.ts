// AuthorizationPolicy -> rbac filters, asserted on the generated Envoy config field by field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { JsonValue } from '@bufbuild/protobuf';
import { buildRbacFilters, parseRbacPolicyName, rbacPolicyName } from '../../src/security/authz/builder.js';
import { requestPrincipalMatchers, stringMatcher } from '../../src/security/authz/matchers.js';
import { StringMatcherSchema } from '../../src/gen/envoy/type/matcher/v3/string_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import type { Rule } from '../../src/api/types.js';
import { andIds, andRules, authz, claim, idValues, issSub, notId, notRule, onlyPolicy, orIds, orRules, rbacAllows, rbacJson, ruleValues, withPayload } from './fixtures.js';

const ANY_RULE = { any: true };
const ANY_ID = { any: true };

function policyOf(rule: Rule): JsonValue {
  const { filters, warnings } = buildRbacFilters([authz('p', { rules: [rule] })]);
  assert.deepEqual(warnings, []);
  assert.equal(filters.length, 1);
  return onlyPolicy(rbacJson(filters[0]!.config));
}

/**
 * The clauses (one per field) that a from-principal or to-permission ANDs: the clause itself when
 * there is one, the list otherwise, `any` when there is none.
 */
function clauses(x: JsonValue): JsonValue {
  const o = x as { and_ids?: { ids: JsonValue[] }; and_rules?: { rules: JsonValue[] } };
  const list = o.and_ids?.ids ?? o.and_rules?.rules;
  if (!list) return x;
  return list.length === 1 ? list[0]! : list;
}

/** The clauses of the single principal of a rule with one `from` source and no `when`. */
function principalOf(source: NonNullable<Rule['from']>[number]['source']): JsonValue {
  const p = policyOf({ from: [{ source }] }) as { principals: JsonValue[]; permissions: JsonValue[] };
  assert.deepEqual(p.permissions, [ANY_RULE]);
  assert.equal(p.principals.length, 1);
  return clauses(p.principals[0]!);
}

function permissionOf(operation: NonNullable<Rule['to']>[number]['operation']): JsonValue {
  const p = policyOf({ to: [{ operation }] }) as { principals: JsonValue[]; permissions: JsonValue[] };
  assert.deepEqual(p.principals, [ANY_ID]);
  assert.equal(p.permissions.length, 1);
  return clauses(p.permissions[0]!);
}

function whenOf(key: string, values: string[], notValues?: string[]): { principals: JsonValue; permissions: JsonValue } {
  const p = policyOf({ when: [{ key, values, ...(notValues ? { notValues } : {}) }] }) as { principals: JsonValue[]; permissions: JsonValue[] };
  assert.equal(p.principals.length, 1);
  assert.equal(p.permissions.length, 1);
  return { principals: clauses(p.principals[0]!), permissions: clauses(p.permissions[0]!) };
}

const sm = (v: string, opts?: { prefix?: string; ignoreCase?: boolean }) => toEnvoyJson(StringMatcherSchema, stringMatcher(v, opts));

test('value syntax: exact, prefix*, *suffix and * (any non-empty value)', () => {
  assert.deepEqual(sm('a.b'), { exact: 'a.b' });
  assert.deepEqual(sm('/api/*'), { prefix: '/api/' });
  assert.deepEqual(sm('*.txt'), { suffix: '.txt' });
  assert.deepEqual(sm('*'), { safe_regex: { regex: '.+' } });
  assert.deepEqual(sm('Example.COM', { ignoreCase: true }), { exact: 'Example.COM', ignore_case: true });
  // With a required prefix (SPIFFE scheme), `*suffix` and `prefix*` still require it; `*` alone is any value.
  assert.deepEqual(sm('*', { prefix: 'spiffe://' }), { safe_regex: { regex: '.+' } });
  assert.deepEqual(sm('*/sa/x.y', { prefix: 'spiffe://' }), { safe_regex: { regex: 'spiffe://.*/sa/x\\.y' } });
  assert.deepEqual(sm('td/ns/*', { prefix: 'spiffe://' }), { prefix: 'spiffe://td/ns/' });
});

test('filters: one per action present, in the order CUSTOM, AUDIT, DENY, ALLOW, with Envoy actions', () => {
  const r = buildRbacFilters([
    authz('allow', { rules: [{}] }),
    authz('deny', { action: 'DENY', rules: [{}] }),
    authz('audit', { action: 'AUDIT', rules: [{}] }),
    authz('custom', { action: 'CUSTOM', provider: { name: 'ext' }, rules: [{}] }),
  ]);
  assert.deepEqual(r.filters.map((f) => [f.name, f.action]), [
    ['envoy.filters.http.rbac', 'CUSTOM'],
    ['envoy.filters.http.rbac', 'AUDIT'],
    ['envoy.filters.http.rbac', 'DENY'],
    ['envoy.filters.http.rbac', 'ALLOW'],
  ]);
  const [custom, audit, deny, allow] = r.filters.map((f) => rbacJson(f.config) as { rules: { action?: string; policies: object }; rules_stat_prefix?: string });
  // No provider can be resolved here: the CUSTOM rules deny what they would have sent to it.
  assert.equal(custom!.rules.action, 'DENY');
  assert.deepEqual(Object.keys(custom!.rules.policies), ['mesh-ext-authz-ext-ns[foo]-policy[custom]-rule[0]-deny-due-to-bad-CUSTOM-action']);
  assert.match(r.warnings.join('\n'), /AuthorizationPolicy foo\/custom \(CUSTOM\): no extension provider "ext" in mesh config extensionProviders; the requests its rules match are denied/);
  assert.equal(audit!.rules.action, 'LOG');
  assert.equal(deny!.rules.action, 'DENY');
  assert.equal(allow!.rules.action, undefined, 'ALLOW is the proto default');
  assert.deepEqual(Object.keys(allow!.rules.policies), ['ns[foo]-policy[allow]-rule[0]']);
  assert.deepEqual(buildRbacFilters([]).filters, [], 'no policy: no filter');
  assert.deepEqual(buildRbacFilters([authz('d', { action: 'DENY', rules: [{}] })]).filters.map((f) => f.action), ['DENY'], 'absent actions: no filter');
});

test('spec: {} is ALLOW with no rules: an ALLOW filter with no policies (denies everything)', () => {
  const { filters } = buildRbacFilters([authz('nothing', {})]);
  assert.equal(filters.length, 1);
  assert.deepEqual(rbacJson(filters[0]!.config), { rules: {} });
  assert.equal(rbacAllows(filters[0]!.config, { path: '/' }), false);
});

test('rules: [{}] matches every request; DENY without rules denies nothing', () => {
  assert.deepEqual(policyOf({}), { permissions: [ANY_RULE], principals: [ANY_ID] });
  const { filters } = buildRbacFilters([authz('d', { action: 'DENY' })]);
  assert.deepEqual(rbacJson(filters[0]!.config), { rules: { action: 'DENY' } });
  assert.equal(rbacAllows(filters[0]!.config), true);
});

test('policy names: ns[<ns>]-policy[<name>]-rule[<i>], and back', () => {
  assert.equal(rbacPolicyName('foo', 'bar', 2), 'ns[foo]-policy[bar]-rule[2]');
  assert.deepEqual(parseRbacPolicyName('ns[foo]-policy[bar]-rule[2]'), { namespace: 'foo', name: 'bar', rule: 2 });
  assert.equal(parseRbacPolicyName('other'), undefined);
});

test('source.principals and notPrincipals match the peer SPIFFE identity', () => {
  const auth = (m: JsonValue) => ({ authenticated: { principal_name: m } });
  assert.deepEqual(principalOf({ principals: ['cluster.local/ns/a/sa/b', 'cluster.local/ns/c/*'] }), idValues(auth({ exact: 'spiffe://cluster.local/ns/a/sa/b' }), auth({ prefix: 'spiffe://cluster.local/ns/c/' })));
  assert.deepEqual(principalOf({ notPrincipals: ['*'] }), andIds(notId(orIds(auth({ safe_regex: { regex: '.+' } })))));
  assert.deepEqual(
    principalOf({ principals: ['*/sa/admin'], notPrincipals: ['td/ns/x/sa/admin'] }),
    andIds(orIds(auth({ safe_regex: { regex: 'spiffe://.*/sa/admin' } })), notId(orIds(auth({ exact: 'spiffe://td/ns/x/sa/admin' })))),
  );
});

test('source.namespaces and notNamespaces match the namespace inside the identity as .*/ns/<ns>/.*', () => {
  const ns = (re: string) => ({ authenticated: { principal_name: { safe_regex: { regex: re } } } });
  assert.deepEqual(principalOf({ namespaces: ['prod', 'dev-*', '*-test', '*'] }), idValues(
    ns('.*/ns/prod/.*'),
    ns('.*/ns/dev-.*/.*'),
    ns('.*/ns/.*-test/.*'),
    ns('.*/ns/.*/.*'),
  ));
  assert.deepEqual(principalOf({ notNamespaces: ['kube.system'] }), andIds(notId(orIds(ns('.*/ns/kube\\.system/.*')))));
});

test('source.namespaces admits SPIFFE ids with extra path segments, and only the namespace named', () => {
  const filter = buildRbacFilters([authz('p', { rules: [{ from: [{ source: { namespaces: ['prod'] } }] }] })]).filters[0]!.config;
  const from = (uri: string) => rbacAllows(filter, { peer: { uriSans: [uri], dnsSans: [], subject: '' } });
  assert.equal(from('spiffe://cluster.local/ns/prod/sa/web'), true);
  assert.equal(from('spiffe://cluster.local/ns/prod/sa/web/extra'), true);
  assert.equal(from('spiffe://cluster.local/region/eu/ns/prod/sa/web'), true);
  assert.equal(from('spiffe://cluster.local/ns/prod/workload/w1/sa/web'), true);
  assert.equal(from('spiffe://cluster.local/ns/production/sa/web'), false);
  assert.equal(from('spiffe://cluster.local/ns/dev/sa/prod'), false);
  assert.equal(from('spiffe://cluster.local/ns/xprod/sa/web'), false);
});

test('source.ipBlocks / remoteIpBlocks and their not*: direct_remote_ip / remote_ip CIDR ranges', () => {
  assert.deepEqual(principalOf({ ipBlocks: ['10.0.0.0/8', '1.2.3.4', '2001:db8::/32'] }), idValues(
    { direct_remote_ip: { address_prefix: '10.0.0.0', prefix_len: 8 } },
    { direct_remote_ip: { address_prefix: '1.2.3.4', prefix_len: 32 } },
    { direct_remote_ip: { address_prefix: '2001:db8::', prefix_len: 32 } },
  ));
  assert.deepEqual(principalOf({ notIpBlocks: ['::1'] }), andIds(notId(orIds({ direct_remote_ip: { address_prefix: '::1', prefix_len: 128 } }))));
  assert.deepEqual(principalOf({ remoteIpBlocks: ['192.168.0.0/16'], notRemoteIpBlocks: ['192.168.1.0/24'] }), andIds(
    orIds({ remote_ip: { address_prefix: '192.168.0.0', prefix_len: 16 } }),
    notId(orIds({ remote_ip: { address_prefix: '192.168.1.0', prefix_len: 24 } })),
  ));
});

test('requestPrincipals <iss>/<sub>: metadata matchers on the jwt payload iss and sub', () => {
  assert.deepEqual(principalOf({ requestPrincipals: ['testing@secure.mesh.io/testing@secure.mesh.io'] }), idValues(issSub({ exact: 'testing@secure.mesh.io' }, { exact: 'testing@secure.mesh.io' })));
  // `*`: any authenticated request principal (iss and sub present and non-empty).
  assert.deepEqual(principalOf({ requestPrincipals: ['*'] }), idValues(issSub({ safe_regex: { regex: '.+' } }, { safe_regex: { regex: '.+' } })));
  assert.deepEqual(principalOf({ notRequestPrincipals: ['iss/bad'] }), andIds(notId(orIds(issSub({ exact: 'iss' }, { exact: 'bad' })))));
});

test('requestPrincipals split at the LAST "/": a URL issuer, and no other issuer admitted', () => {
  const p = principalOf({ requestPrincipals: ['https://issuer.example/alice'] });
  assert.deepEqual(p, idValues(issSub({ exact: 'https://issuer.example' }, { exact: 'alice' })));
  const filter = buildRbacFilters([authz('p', { rules: [{ from: [{ source: { requestPrincipals: ['https://issuer.example/alice'] } }] }] })]).filters[0]!.config;
  assert.equal(rbacAllows(filter, withPayload({ iss: 'https://issuer.example', sub: 'alice' })), true);
  assert.equal(rbacAllows(filter, withPayload({ iss: 'https://issuer.example', sub: 'bob' })), false);
  assert.equal(rbacAllows(filter, withPayload({ iss: 'https://other.example', sub: 'alice' })), false);
  // Another trusted issuer cannot forge the principal by putting the rest of it in `sub`.
  const tenant = buildRbacFilters([authz('p', { rules: [{ from: [{ source: { requestPrincipals: ['https://a.example/tenant-b/alice'] } }] }] })]).filters[0]!.config;
  assert.equal(rbacAllows(tenant, withPayload({ iss: 'https://a.example/tenant-b', sub: 'alice' })), true);
  assert.equal(rbacAllows(tenant, withPayload({ iss: 'https://a.example', sub: 'tenant-b/alice' })), false);
  assert.equal(rbacAllows(tenant, withPayload({ iss: 'https:', sub: '/a.example/tenant-b/alice' })), false);
});

test('requestPrincipals wildcards: only the whole value, a leading or a trailing `*`, as the production mesh', () => {
  const check = (pattern: string, iss: string, sub: string) => {
    const filter = buildRbacFilters([authz('p', { rules: [{ from: [{ source: { requestPrincipals: [pattern] } }] }] })]).filters[0]!.config;
    return rbacAllows(filter, withPayload({ iss, sub }));
  };
  const cases: [pattern: string, iss: string, sub: string, matches: boolean][] = [
    ['https://a.example/*', 'https://a.example', 'x', true],
    ['https://a.example/*', 'https://a.example/tenant-b', 'x', false],
    ['https://a.example/*', 'https://b.example', 'x', false],
    ['https://a.example/te*', 'https://a.example', 'team', true],
    ['https://a.example/te*', 'https://a.example/te', 'x', false],
    ['*/alice', 'https://any.example', 'alice', true],
    ['*/alice', 'iss', 'bob', false],
    ['*ple/alice', 'https://a.example', 'alice', true],
    ['*ple/alice', 'https://a.examplX', 'alice', false],
    ['*e', 'iss', 'alice', true],
    ['*e', 'iss', 'bob', false],
    ['iss*', 'issuer', 'bob', true],
    ['iss*', 'other', 'issuer', false],
    // A `*` inside the value is a literal character.
    ['https://a.example/*ice', 'https://a.example', 'alice', false],
    ['https://a.example/*ice', 'https://a.example', '*ice', true],
    ['https://a.*/alice', 'https://a.example', 'alice', false],
  ];
  for (const [pattern, iss, sub, matches] of cases) assert.equal(check(pattern, iss, sub), matches, `${pattern} vs ${iss} + ${sub}`);
  // Without a "/" the subject is empty: no token has one, so the value matches nothing.
  assert.deepEqual(toEnvoyJson(StringMatcherSchema, requestPrincipalMatchers('no-slash').sub), { exact: '' });
  assert.equal(check('no-slash', 'no-slash', 'x'), false);
});

test('operation hosts, ports, methods, paths and not*', () => {
  assert.deepEqual(permissionOf({ hosts: ['Example.com', '*.example.com', '*'] }), ruleValues(
    { header: { name: ':authority', string_match: { exact: 'Example.com', ignore_case: true } } },
    { header: { name: ':authority', string_match: { suffix: '.example.com', ignore_case: true } } },
    { header: { name: ':authority', present_match: true } },
  ));
  assert.deepEqual(permissionOf({ notHosts: ['admin.*'] }), andRules(notRule(orRules({ header: { name: ':authority', string_match: { prefix: 'admin.', ignore_case: true } } }))));
  assert.deepEqual(permissionOf({ ports: ['8080'], notPorts: ['9090'] }), andRules(orRules({ destination_port: 8080 }), notRule(orRules({ destination_port: 9090 }))));
  assert.deepEqual(permissionOf({ methods: ['GET', 'HEAD'] }), ruleValues(
    { header: { name: ':method', string_match: { exact: 'GET' } } },
    { header: { name: ':method', string_match: { exact: 'HEAD' } } },
  ));
  assert.deepEqual(permissionOf({ notMethods: ['DELETE'] }), andRules(notRule(orRules({ header: { name: ':method', string_match: { exact: 'DELETE' } } }))));
  assert.deepEqual(permissionOf({ paths: ['/info', '/api/*', '*.png'] }), ruleValues(
    { url_path: { path: { exact: '/info' } } },
    { url_path: { path: { prefix: '/api/' } } },
    { url_path: { path: { suffix: '.png' } } },
  ));
  assert.deepEqual(permissionOf({ notPaths: ['/admin*'] }), andRules(notRule(orRules({ url_path: { path: { prefix: '/admin' } } }))));
  // Fields of one operation are ANDed, in a fixed order.
  assert.deepEqual(permissionOf({ methods: ['GET'], paths: ['/a'] }), [
    ruleValues({ header: { name: ':method', string_match: { exact: 'GET' } } }),
    ruleValues({ url_path: { path: { exact: '/a' } } }),
  ]);
});

test('when keys: request.auth.claims (nested, list semantics), principal, audiences, presenter', () => {
  assert.deepEqual(whenOf('request.auth.claims[groups]', ['group1']).principals, idValues(claim(['groups'], { exact: 'group1' })));
  assert.deepEqual(whenOf('request.auth.claims[realm][roles]', ['admin*']).principals, idValues(claim(['realm', 'roles'], { prefix: 'admin' })));
  assert.deepEqual(whenOf('request.auth.claims[scope]', ['read'], ['write']).principals, andIds(orIds(claim(['scope'], { exact: 'read' })), notId(orIds(claim(['scope'], { exact: 'write' })))));
  assert.deepEqual(whenOf('request.auth.principal', ['iss/sub']).principals, idValues(issSub({ exact: 'iss' }, { exact: 'sub' })));
  assert.deepEqual(whenOf('request.auth.audiences', ['api']).principals, idValues(claim(['aud'], { exact: 'api' })));
  assert.deepEqual(whenOf('request.auth.presenter', ['client-*']).principals, idValues(claim(['azp'], { prefix: 'client-' })));
  for (const key of ['request.auth.claims[groups]', 'request.auth.principal']) assert.deepEqual(whenOf(key, ['a/b']).permissions, ANY_RULE);
});

test('when keys: request.headers, source.ip, remote.ip, source.namespace, source.principal', () => {
  assert.deepEqual(whenOf('request.headers[X-Tenant]', ['acme', '*']).principals, idValues(
    { header: { name: 'X-Tenant', string_match: { exact: 'acme' } } },
    { header: { name: 'X-Tenant', present_match: true } },
  ));
  assert.deepEqual(whenOf('source.ip', ['10.0.0.1']).principals, idValues({ direct_remote_ip: { address_prefix: '10.0.0.1', prefix_len: 32 } }));
  assert.deepEqual(whenOf('remote.ip', ['10.0.0.0/24']).principals, idValues({ remote_ip: { address_prefix: '10.0.0.0', prefix_len: 24 } }));
  assert.deepEqual(whenOf('source.namespace', ['prod']).principals, idValues({ authenticated: { principal_name: { safe_regex: { regex: '.*/ns/prod/.*' } } } }));
  assert.deepEqual(whenOf('source.principal', ['td/ns/a/sa/b']).principals, idValues({ authenticated: { principal_name: { exact: 'spiffe://td/ns/a/sa/b' } } }));
});

test('when keys: destination.ip, destination.port, connection.sni are permissions', () => {
  const dip = whenOf('destination.ip', ['10.1.0.0/16']);
  assert.deepEqual(dip.permissions, ruleValues({ destination_ip: { address_prefix: '10.1.0.0', prefix_len: 16 } }));
  assert.deepEqual(dip.principals, ANY_ID);
  assert.deepEqual(whenOf('destination.port', ['443'], ['8443']).permissions, andRules(orRules({ destination_port: 443 }), notRule(orRules({ destination_port: 8443 }))));
  assert.deepEqual(whenOf('connection.sni', ['*.example.com']).permissions, ruleValues({ requested_server_name: { suffix: '.example.com' } }));
});

test('a rule: one principal per from, one permission per to, when merged into each; policies merge by name', () => {
  const rule: Rule = {
    from: [{ source: { namespaces: ['a'] } }, { source: { ipBlocks: ['10.0.0.0/8'] } }],
    to: [{ operation: { methods: ['GET'] } }, { operation: { paths: ['/x'] } }],
    when: [{ key: 'request.auth.claims[groups]', values: ['g'] }, { key: 'destination.port', values: ['80'] }],
  };
  const nsA = { authenticated: { principal_name: { safe_regex: { regex: '.*/ns/a/.*' } } } };
  const groups = idValues(claim(['groups'], { exact: 'g' }));
  const port80 = ruleValues({ destination_port: 80 });
  assert.deepEqual(policyOf(rule), {
    permissions: [
      andRules(ruleValues({ header: { name: ':method', string_match: { exact: 'GET' } } }), port80),
      andRules(ruleValues({ url_path: { path: { exact: '/x' } } }), port80),
    ],
    principals: [andIds(idValues(nsA), groups), andIds(idValues({ direct_remote_ip: { address_prefix: '10.0.0.0', prefix_len: 8 } }), groups)],
  });
  const merged = buildRbacFilters([authz('one', { rules: [{}, { to: [{ operation: { paths: ['/a'] } }] }] }), authz('two', { rules: [{}] }, 'bar')]);
  assert.deepEqual(Object.keys((rbacJson(merged.filters[0]!.config) as { rules: { policies: object } }).rules.policies).sort(), [
    'ns[bar]-policy[two]-rule[0]',
    'ns[foo]-policy[one]-rule[0]',
    'ns[foo]-policy[one]-rule[1]',
  ]);
});

test('untranslatable values fail closed: an ALLOW rule is dropped, a DENY field is dropped (denies more)', () => {
  const allow = buildRbacFilters([authz('a', { rules: [{ from: [{ source: { ipBlocks: ['10.0.0.300'] } }] }, {}] })]);
  assert.deepEqual(Object.keys((rbacJson(allow.filters[0]!.config) as { rules: { policies: object } }).rules.policies), ['ns[foo]-policy[a]-rule[1]']);
  assert.match(allow.warnings[0]!, /AuthorizationPolicy foo\/a rules\[0\]\.from\[0\]\.source\.ipBlocks: "10\.0\.0\.300" is not an IP address.*rule ignored/);
  const deny = buildRbacFilters([authz('d', { action: 'DENY', rules: [{ to: [{ operation: { paths: ['/admin'], ports: ['http'] } }] }] })]);
  assert.deepEqual(onlyPolicy(rbacJson(deny.filters[0]!.config)), { permissions: [andRules(ruleValues({ url_path: { path: { exact: '/admin' } } }))], principals: [ANY_ID] });
  assert.match(deny.warnings[0]!, /to\[0\]\.operation\.ports: "http" is not a port.*field ignored/);
  const unknownKey = buildRbacFilters([authz('a', { rules: [{ when: [{ key: 'request.nope', values: ['x'] }] }] })]);
  assert.deepEqual(rbacJson(unknownKey.filters[0]!.config), { rules: {} });
  assert.match(unknownKey.warnings[0]!, /unknown key "request\.nope"/);
  const protoKey = buildRbacFilters([authz('a', { rules: [{ when: [{ key: 'constructor', values: ['x'] }] }] })]);
  assert.match(protoKey.warnings[0]!, /unknown key "constructor"/);
  const noValues = buildRbacFilters([authz('a', { rules: [{ when: [{ key: 'source.ip' }] }] })]);
  assert.match(noValues.warnings[0]!, /no values or notValues/);
});
