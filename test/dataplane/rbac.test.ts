import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { RBAC_Action, RBACSchema as RbacRulesSchema, type PermissionSchema, type PrincipalSchema } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { compileRbacEngine, compileRbacFilter, RBAC_DENIED_BODY } from '../../src/envoy/rbac.js';
import { RBAC_FILTER_NAME } from '../../src/envoy/names.js';
import { requestView, type RequestViewInit } from '../../src/envoy/request.js';
import { metadataValue } from '../../src/envoy/matchers.js';

type PermissionInit = MessageInitShape<typeof PermissionSchema>;
type PrincipalInit = MessageInitShape<typeof PrincipalSchema>;

const ANY_PERMISSION: PermissionInit = { rule: { case: 'any', value: true } };
const ANY_PRINCIPAL: PrincipalInit = { identifier: { case: 'any', value: true } };

function engine(permission: PermissionInit, principal: PrincipalInit = ANY_PRINCIPAL, action = RBAC_Action.ALLOW) {
  return compileRbacEngine(create(RbacRulesSchema, { action, policies: { p: { permissions: [permission], principals: [principal] } } }));
}

/** Whether the single-policy ALLOW engine matches the request. */
function permits(permission: PermissionInit, init: RequestViewInit): boolean {
  return engine(permission).evaluate(requestView(init)).allowed;
}

function identifies(principal: PrincipalInit, init: RequestViewInit): boolean {
  return engine(ANY_PERMISSION, principal).evaluate(requestView(init)).allowed;
}

const exact = (value: string) => ({ matchPattern: { case: 'exact' as const, value } });

// The metadata matchers the mesh emits for requestPrincipals and request.auth.claims.
const JWT = 'envoy.filters.http.jwt_authn';
function claimIs(path: string[], value: string): PrincipalInit {
  return {
    identifier: {
      case: 'metadata',
      value: { filter: JWT, path: path.map((key) => ({ segment: { case: 'key', value: key } })), value: { matchPattern: { case: 'stringMatch', value: exact(value) } } },
    },
  };
}
function claimListHas(path: string[], value: string): PrincipalInit {
  return {
    identifier: {
      case: 'metadata',
      value: {
        filter: JWT,
        path: path.map((key) => ({ segment: { case: 'key', value: key } })),
        value: { matchPattern: { case: 'listMatch', value: { matchPattern: { case: 'oneOf', value: { matchPattern: { case: 'stringMatch', value: exact(value) } } } } } },
      },
    },
  };
}
const withPayload = (payload: Record<string, unknown>): RequestViewInit => ({ metadata: { [JWT]: { payload: payload as never } } });

describe('rbac permissions', () => {
  it('and_rules / or_rules / not_rule / any', () => {
    const get: PermissionInit = { rule: { case: 'header', value: { name: ':method', headerMatchSpecifier: { case: 'exactMatch', value: 'GET' } } } };
    const admin: PermissionInit = { rule: { case: 'urlPath', value: { rule: { case: 'path', value: { matchPattern: { case: 'prefix', value: '/admin' } } } } } };
    const and: PermissionInit = { rule: { case: 'andRules', value: { rules: [get, admin] } } };
    const or: PermissionInit = { rule: { case: 'orRules', value: { rules: [get, admin] } } };
    const not: PermissionInit = { rule: { case: 'notRule', value: admin } };
    assert.equal(permits(and, { method: 'GET', path: '/admin/x' }), true);
    assert.equal(permits(and, { method: 'POST', path: '/admin/x' }), false);
    assert.equal(permits(or, { method: 'POST', path: '/admin/x' }), true);
    assert.equal(permits(or, { method: 'POST', path: '/x' }), false);
    assert.equal(permits(not, { path: '/x' }), true);
    assert.equal(permits(not, { path: '/admin' }), false);
    assert.equal(permits(ANY_PERMISSION, {}), true);
  });

  it('url_path: exact, prefix, suffix, contains, safe_regex, ignore_case; the query is not part of the path', () => {
    const path = (m: object): PermissionInit => ({ rule: { case: 'urlPath', value: { rule: { case: 'path', value: m } } } });
    assert.equal(permits(path(exact('/a')), { path: '/a?x=1' }), true);
    assert.equal(permits(path(exact('/a')), { path: '/a/b' }), false);
    assert.equal(permits(path({ matchPattern: { case: 'suffix', value: '.json' } }), { path: '/x.json' }), true);
    assert.equal(permits(path({ matchPattern: { case: 'contains', value: 'mid' } }), { path: '/a/mid/b' }), true);
    assert.equal(permits(path({ matchPattern: { case: 'safeRegex', value: { regex: '/items/[0-9]+' } } }), { path: '/items/42' }), true);
    assert.equal(permits(path({ matchPattern: { case: 'safeRegex', value: { regex: '/items/[0-9]+' } } }), { path: '/items/42/x' }), false, 'a regex matches the whole path');
    assert.equal(permits(path({ matchPattern: { case: 'prefix', value: '/API' }, ignoreCase: true }), { path: '/api/v1' }), true);
    assert.equal(permits(path({ matchPattern: { case: 'prefix', value: '/API' } }), { path: '/api/v1' }), false);
  });

  it('header: values joined with ",", present_match, invert_match, a missing header, ranges', () => {
    const header = (value: object): PermissionInit => ({ rule: { case: 'header', value: { name: 'x-env', ...value } } });
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'exactMatch', value: 'a,b' } }), { headers: { 'x-env': ['a', 'b'] } }), true);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'presentMatch', value: true } }), { headers: { 'x-env': '' } }), true);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'presentMatch', value: true } }), {}), false);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'presentMatch', value: false } }), {}), true);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'prefixMatch', value: 'pr' }, invertMatch: true }), { headers: { 'x-env': 'dev' } }), true);
    // A missing header never matches a value test, inverted or not.
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'prefixMatch', value: 'pr' }, invertMatch: true }), {}), false);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'stringMatch', value: exact('') }, treatMissingHeaderAsEmpty: true }), {}), true);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'rangeMatch', value: { start: 10n, end: 20n } } }), { headers: { 'x-env': '15' } }), true);
    assert.equal(permits(header({ headerMatchSpecifier: { case: 'rangeMatch', value: { start: 10n, end: 20n } } }), { headers: { 'x-env': '20' } }), false);
  });

  it('destination_ip, destination_port, destination_port_range', () => {
    const dst = { address: '10.1.2.3', port: 8080 };
    assert.equal(permits({ rule: { case: 'destinationIp', value: { addressPrefix: '10.1.0.0', prefixLen: 16 } } }, { destination: dst }), true);
    assert.equal(permits({ rule: { case: 'destinationIp', value: { addressPrefix: '10.2.0.0', prefixLen: 16 } } }, { destination: dst }), false);
    assert.equal(permits({ rule: { case: 'destinationPort', value: 8080 } }, { destination: dst }), true);
    assert.equal(permits({ rule: { case: 'destinationPort', value: 80 } }, { destination: dst }), false);
    assert.equal(permits({ rule: { case: 'destinationPortRange', value: { start: 8000, end: 8081 } } }, { destination: dst }), true);
    assert.equal(permits({ rule: { case: 'destinationPortRange', value: { start: 8000, end: 8080 } } }, { destination: dst }), false);
  });

  it('requested_server_name and metadata', () => {
    assert.equal(permits({ rule: { case: 'requestedServerName', value: { matchPattern: { case: 'suffix', value: '.svc' } } } }, { requestedServerName: 'a.svc' }), true);
    assert.equal(permits({ rule: { case: 'requestedServerName', value: { matchPattern: { case: 'suffix', value: '.svc' } } } }, {}), false);
    const md: PermissionInit = { rule: { case: 'metadata', value: { filter: JWT, path: [{ segment: { case: 'key', value: 'payload' } }, { segment: { case: 'key', value: 'sub' } }], value: { matchPattern: { case: 'stringMatch', value: exact('alice') } } } } };
    assert.equal(permits(md, withPayload({ sub: 'alice' })), true);
    assert.equal(permits(md, withPayload({ sub: 'bob' })), false);
  });
});

describe('rbac principals', () => {
  it('request principal <iss>/<sub> as two metadata matchers under and_ids', () => {
    const principal: PrincipalInit = { identifier: { case: 'andIds', value: { ids: [claimIs(['payload', 'iss'], 'https://iss'), claimIs(['payload', 'sub'], 'alice')] } } };
    assert.equal(identifies(principal, withPayload({ iss: 'https://iss', sub: 'alice' })), true);
    assert.equal(identifies(principal, withPayload({ iss: 'https://iss', sub: 'bob' })), false);
    assert.equal(identifies(principal, {}), false, 'no token, no metadata: no match');
  });

  it('claims: list match (groups), a string claim, a nested claim, a missing claim', () => {
    assert.equal(identifies(claimListHas(['payload', 'groups'], 'admins'), withPayload({ groups: ['dev', 'admins'] })), true);
    assert.equal(identifies(claimListHas(['payload', 'groups'], 'admins'), withPayload({ groups: ['dev'] })), false);
    assert.equal(identifies(claimListHas(['payload', 'groups'], 'admins'), withPayload({ groups: 'admins' })), false, 'list_match needs a list');
    assert.equal(identifies(claimListHas(['payload', 'scope'], 'read'), withPayload({ scope: ['read', 'write'] })), true);
    assert.equal(identifies(claimIs(['payload', 'team'], 'blue'), withPayload({ team: 'blue' })), true);
    assert.equal(identifies(claimIs(['payload', 'org', 'unit'], 'x'), withPayload({ org: { unit: 'x' } })), true);
    assert.equal(identifies(claimIs(['payload', 'org', 'unit'], 'x'), withPayload({ org: 'x' })), false);
    assert.equal(identifies(claimListHas(['payload', 'groups'], 'admins'), withPayload({})), false);
  });

  it('metadata: invert, present_match, null_match, bool and double matches, or_match', () => {
    const m = (value: object, invert = false): PrincipalInit => ({ identifier: { case: 'metadata', value: { filter: JWT, path: [{ segment: { case: 'key', value: 'payload' } }, { segment: { case: 'key', value: 'v' } }], value, invert } } });
    assert.equal(identifies(m({ matchPattern: { case: 'presentMatch', value: true } }), withPayload({ v: 0 })), true);
    assert.equal(identifies(m({ matchPattern: { case: 'presentMatch', value: true } }), withPayload({})), false);
    assert.equal(identifies(m({ matchPattern: { case: 'presentMatch', value: true } }, true), withPayload({})), true);
    assert.equal(identifies(m({ matchPattern: { case: 'nullMatch', value: {} } }), withPayload({ v: null })), true);
    assert.equal(identifies(m({ matchPattern: { case: 'boolMatch', value: true } }), withPayload({ v: true })), true);
    assert.equal(identifies(m({ matchPattern: { case: 'doubleMatch', value: { matchPattern: { case: 'range', value: { start: 1, end: 5 } } } } }), withPayload({ v: 4.5 })), true);
    assert.equal(identifies(m({ matchPattern: { case: 'orMatch', value: { valueMatchers: [{ matchPattern: { case: 'boolMatch', value: true } }, { matchPattern: { case: 'stringMatch', value: exact('y') } }] } } }), withPayload({ v: 'y' })), true);
  });

  it('source_ip / direct_remote_ip / remote_ip CIDRs, IPv6 and IPv4-mapped addresses', () => {
    const cidr = (c: 'sourceIp' | 'directRemoteIp' | 'remoteIp', addressPrefix: string, prefixLen: number): PrincipalInit => ({ identifier: { case: c, value: { addressPrefix, prefixLen } } });
    const init: RequestViewInit = { source: { address: '::ffff:192.168.1.7', port: 1 }, remote: { address: '203.0.113.9', port: 0 } };
    assert.equal(identifies(cidr('sourceIp', '192.168.0.0', 16), init), true);
    assert.equal(identifies(cidr('directRemoteIp', '192.168.1.7', 32), init), true);
    assert.equal(identifies(cidr('directRemoteIp', '203.0.113.0', 24), init), false);
    assert.equal(identifies(cidr('remoteIp', '203.0.113.0', 24), init), true);
    assert.equal(identifies(cidr('sourceIp', 'fd00::', 8), { source: { address: 'fd00::1', port: 1 } }), true);
    assert.equal(identifies(cidr('sourceIp', 'fd00::', 8), init), false, 'families do not mix');
  });

  it('authenticated: any verified peer, or principal_name against URI SANs, DNS SANs, subject', () => {
    const peer = { uriSans: ['spiffe://cluster.local/ns/a/sa/b'], dnsSans: ['b.a.svc'], subject: 'CN=b' };
    const auth = (principalName?: object): PrincipalInit => ({ identifier: { case: 'authenticated', value: principalName ? { principalName } : {} } });
    assert.equal(identifies(auth(), { peer }), true);
    assert.equal(identifies(auth(), {}), false);
    assert.equal(identifies(auth(exact('spiffe://cluster.local/ns/a/sa/b')), { peer }), true);
    assert.equal(identifies(auth(exact('b.a.svc')), { peer }), true);
    assert.equal(identifies(auth({ matchPattern: { case: 'prefix', value: 'spiffe://cluster.local/ns/other/' } }), { peer }), false);
  });

  it('not_id, or_ids, header and url_path principals', () => {
    const fromA: PrincipalInit = { identifier: { case: 'header', value: { name: 'x-from', headerMatchSpecifier: { case: 'exactMatch', value: 'a' } } } };
    assert.equal(identifies({ identifier: { case: 'notId', value: fromA } }, { headers: { 'x-from': 'b' } }), true);
    assert.equal(identifies({ identifier: { case: 'orIds', value: { ids: [fromA, { identifier: { case: 'urlPath', value: { rule: { case: 'path', value: exact('/p') } } } }] } } }, { path: '/p' }), true);
  });
});

describe('rbac engine and filter', () => {
  const policies = {
    'b-readers': { permissions: [{ rule: { case: 'header' as const, value: { name: ':method', headerMatchSpecifier: { case: 'exactMatch' as const, value: 'GET' } } } }], principals: [ANY_PRINCIPAL] },
    'a-admins': { permissions: [ANY_PERMISSION], principals: [claimListHas(['payload', 'groups'], 'admins')] },
  };

  it('ALLOW: allowed when a policy matches, with the first (by name) as the effective policy', () => {
    const e = compileRbacEngine(create(RbacRulesSchema, { action: RBAC_Action.ALLOW, policies }));
    assert.deepEqual(e.evaluate(requestView({ method: 'GET', ...withPayload({ groups: ['admins'] }) })), { allowed: true, matchedPolicy: 'a-admins' });
    assert.deepEqual(e.evaluate(requestView({ method: 'GET' })), { allowed: true, matchedPolicy: 'b-readers' });
    assert.deepEqual(e.evaluate(requestView({ method: 'POST' })), { allowed: false });
  });

  it('DENY: denied when a policy matches; LOG: always allowed', () => {
    const deny = compileRbacEngine(create(RbacRulesSchema, { action: RBAC_Action.DENY, policies }));
    assert.deepEqual(deny.evaluate(requestView({ method: 'GET' })), { allowed: false, matchedPolicy: 'b-readers' });
    assert.deepEqual(deny.evaluate(requestView({ method: 'POST' })), { allowed: true });
    const logOnly = compileRbacEngine(create(RbacRulesSchema, { action: RBAC_Action.LOG, policies }));
    assert.equal(logOnly.evaluate(requestView({ method: 'POST' })).allowed, true);
  });

  it('ALLOW with no policies denies everything', () => {
    assert.equal(compileRbacEngine(create(RbacRulesSchema, { action: RBAC_Action.ALLOW })).evaluate(requestView({})).allowed, false);
  });

  it('explain names every policy and which permission/principal matched', () => {
    const e = compileRbacEngine(create(RbacRulesSchema, { action: RBAC_Action.ALLOW, policies }));
    assert.deepEqual(e.explain(requestView({ method: 'POST', ...withPayload({ groups: ['admins'] }) })), {
      action: 'ALLOW',
      allowed: true,
      matchedPolicy: 'a-admins',
      policies: [
        { name: 'a-admins', matched: true, permission: 0, principal: 0 },
        { name: 'b-readers', matched: false, principal: 0 },
      ],
    });
  });

  it('the filter answers 403 "RBAC: access denied" and counts', () => {
    const f = compileRbacFilter(create(RBACSchema, { rules: { action: RBAC_Action.ALLOW, policies } }));
    const denied = f.decodeHeaders(requestView({ method: 'POST' }));
    assert.equal(denied.kind, 'reply');
    if (denied.kind === 'reply') {
      assert.equal(denied.reply.status, 403);
      assert.equal(denied.reply.body, RBAC_DENIED_BODY);
    }
    assert.deepEqual(f.decodeHeaders(requestView({ method: 'GET' })), { kind: 'continue' });
    assert.deepEqual(f.stats, { allowed: 1, denied: 1, shadow_allowed: 0, shadow_denied: 0 });
  });

  it('shadow rules are evaluated, counted and recorded in metadata, never enforced', () => {
    const f = compileRbacFilter(create(RBACSchema, { shadowRules: { action: RBAC_Action.ALLOW, policies }, shadowRulesStatPrefix: 'istio_dry_run_allow_' }));
    const req = requestView({ method: 'GET' });
    assert.deepEqual(f.decodeHeaders(req), { kind: 'continue' });
    assert.deepEqual(req.metadata[RBAC_FILTER_NAME], { istio_dry_run_allow_shadow_engine_result: 'allowed', istio_dry_run_allow_shadow_effective_policy_id: 'b-readers' });
    const post = requestView({ method: 'POST' });
    assert.deepEqual(f.decodeHeaders(post), { kind: 'continue' });
    assert.equal(post.metadata[RBAC_FILTER_NAME]?.istio_dry_run_allow_shadow_engine_result, 'denied');
    // Shadow counters carry the shadow_rules_stat_prefix, as Envoy names them.
    assert.deepEqual(f.stats, { allowed: 0, denied: 0, istio_dry_run_allow_shadow_allowed: 1, istio_dry_run_allow_shadow_denied: 1 });
  });

  it('rejects what it cannot evaluate, naming the field', () => {
    assert.throws(
      () => compileRbacEngine(create(RbacRulesSchema, { policies: { p: { permissions: [ANY_PERMISSION], principals: [ANY_PRINCIPAL], condition: {} } } })),
      (e: unknown) => e instanceof ConfigError && e.field === 'rules.policies[p].condition',
    );
    assert.throws(
      () => engine({ rule: { case: 'urlPath', value: { rule: { case: 'path', value: { matchPattern: { case: 'safeRegex', value: { regex: '(' } } } } } } }),
      /rules\.policies\[p\]\.permissions\[0\]\.url_path\.path\.safe_regex\.regex: invalid regex/,
    );
    assert.throws(() => identifies({ identifier: { case: 'sourceIp', value: { addressPrefix: 'nope', prefixLen: 8 } } }, {}), /address_prefix: "nope" is not an IP address/);
  });
});

it('metadata lookups see only the payload\'s own claims, never inherited object properties', () => {
  const md = { 'envoy.filters.http.jwt_authn': { jwt_payload: { sub: 'alice' } } };
  assert.equal(metadataValue(md, 'envoy.filters.http.jwt_authn', ['jwt_payload', 'constructor']), undefined);
  assert.equal(metadataValue(md, 'envoy.filters.http.jwt_authn', ['jwt_payload', '__proto__']), undefined);
  assert.equal(metadataValue(md, 'toString', []), undefined);
  assert.equal(metadataValue(md, 'envoy.filters.http.jwt_authn', ['jwt_payload', 'sub']), 'alice');
});
