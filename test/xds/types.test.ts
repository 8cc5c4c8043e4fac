import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, equals, fromBinary, toBinary } from '@bufbuild/protobuf';
import { AnySchema } from '@bufbuild/protobuf/wkt';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { RBAC_Action } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { meshJwtAuthn, meshProvider } from '../dataplane/fixtures.js';
import { fromEnvoyJson, pack, shortTypeName, toEnvoyJson, TypeUrl, typeUrlOf, unpack, unpackAny } from '../../src/envoy/types.js';

const JWKS = '{"keys":[]}';

function inboundListener() {
  const jwt = pack(JwtAuthenticationSchema, meshJwtAuthn({ 'origins-0': meshProvider('https://issuer.example', JWKS) }));
  const rbac = pack(RBACSchema, {
    rules: {
      action: RBAC_Action.ALLOW,
      policies: {
        'ns[foo]-policy[allow-alice]-rule[0]': {
          permissions: [{ rule: { case: 'any', value: true } }],
          principals: [
            {
              identifier: {
                case: 'metadata',
                value: {
                  filter: 'envoy.filters.http.jwt_authn',
                  path: [{ segment: { case: 'key', value: 'https://issuer.example' } }, { segment: { case: 'key', value: 'sub' } }],
                  value: { matchPattern: { case: 'stringMatch', value: { matchPattern: { case: 'exact', value: 'alice' } } } },
                },
              },
            },
          ],
        },
      },
    },
  });
  const hcm = pack(HttpConnectionManagerSchema, {
    statPrefix: 'inbound_0.0.0.0_8080',
    routeSpecifier: { case: 'rds', value: { routeConfigName: 'inbound|8080||' } },
    httpFilters: [
      { name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig', value: jwt } },
      { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig', value: rbac } },
      { name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } },
    ],
  });
  return create(ListenerSchema, {
    name: 'virtualInbound',
    address: { address: { case: 'socketAddress', value: { address: '0.0.0.0', portSpecifier: { case: 'portValue', value: 15006 } } } },
    filterChains: [
      { name: 'inbound|8080', filters: [{ name: 'envoy.filters.network.http_connection_manager', configType: { case: 'typedConfig', value: hcm } }] },
    ],
  });
}

/** Digs the three HTTP filters out of a Listener, unpacking each Any on the way. */
function httpFilters(listener: ReturnType<typeof inboundListener>) {
  const netFilter = listener.filterChains[0]?.filters[0];
  assert.equal(netFilter?.configType.case, 'typedConfig');
  const hcm = unpack(netFilter.configType.value, HttpConnectionManagerSchema);
  return hcm.httpFilters.map((f) => {
    assert.equal(f.configType.case, 'typedConfig');
    return { name: f.name, config: f.configType.value };
  });
}

test('Listener with HCM, jwt_authn and rbac round-trips through binary', () => {
  const listener = inboundListener();
  const decoded = fromBinary(ListenerSchema, toBinary(ListenerSchema, listener));
  assert.ok(equals(ListenerSchema, listener, decoded));

  const [jwtF, rbacF, routerF] = httpFilters(decoded);
  assert.equal(jwtF?.config.typeUrl, 'type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication');
  const jwt = unpack(jwtF.config, JwtAuthenticationSchema);
  const provider = jwt.providers['origins-0'];
  assert.equal(provider?.issuer, 'https://issuer.example');
  assert.equal(provider.jwksSourceSpecifier.case, 'localJwks');
  assert.deepEqual(provider.jwksSourceSpecifier.value.specifier, { case: 'inlineString', value: JWKS });
  const rbac = unpack(rbacF!.config, RBACSchema);
  assert.equal(rbac.rules?.action, RBAC_Action.ALLOW);
  const principal = rbac.rules.policies['ns[foo]-policy[allow-alice]-rule[0]']?.principals[0];
  assert.equal(principal?.identifier.case, 'metadata');
  assert.deepEqual(
    principal.identifier.value.path.map((p) => p.segment.value),
    ['https://issuer.example', 'sub'],
  );
  assert.equal(routerF?.config.typeUrl, typeUrlOf(RouterSchema));
});

test('Listener round-trips through Envoy JSON with @type in every Any', () => {
  const listener = inboundListener();
  const json = toEnvoyJson(ListenerSchema, listener);
  const text = JSON.stringify(json);
  // Envoy's own mapping: snake_case names, Any as {"@type": url, ...fields}.
  assert.match(text, /"filter_chains":/);
  assert.match(text, /"@type":"type.googleapis.com\/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"/);
  assert.match(text, /"@type":"type.googleapis.com\/envoy.extensions.filters.http.rbac.v3.RBAC"/);
  assert.match(text, /"inline_string":"\{\\"keys\\":\[\]\}"/);
  // ALLOW is the enum's zero value, which proto3 JSON omits, as Envoy's config_dump does.
  assert.match(text, /"rules":\{"policies":\{"ns\[foo\]-policy\[allow-alice\]-rule\[0\]"/);

  const parsed = fromEnvoyJson(ListenerSchema, json);
  assert.ok(equals(ListenerSchema, listener, parsed));
  // Envoy also accepts lowerCamelCase names; so must we.
  const camel = fromEnvoyJson(ListenerSchema, { name: 'l', filterChains: [{ name: 'fc' }] });
  assert.equal(camel.filterChains[0]?.name, 'fc');
});

test('unpackAny resolves any registered type; unpack rejects a mismatched one', () => {
  const any = pack(ClusterSchema, { name: 'outbound|80||a.b.svc.cluster.local' });
  assert.equal(any.typeUrl, TypeUrl.Cluster);
  const msg = unpackAny(any);
  assert.equal(msg.$typeName, 'envoy.config.cluster.v3.Cluster');
  assert.throws(() => unpack(any, ListenerSchema), /holds type.googleapis.com\/envoy.config.cluster.v3.Cluster, expected/);
  assert.throws(() => unpackAny(create(AnySchema, { typeUrl: 'type.googleapis.com/no.Such' })), /not a known Envoy type/);
});

test('short type names for metrics', () => {
  assert.deepEqual(
    [TypeUrl.Listener, TypeUrl.RouteConfiguration, TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Secret].map(shortTypeName),
    ['lds', 'rds', 'cds', 'eds', 'sds'],
  );
});
