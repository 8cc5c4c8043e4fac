// RDS packs a route configuration from its virtual hosts' encodings (src/xds/generators/route-packing.ts):
// the bytes must be exactly the canonical encoding, whatever the configuration holds, so that
// versions (content hashes) and what proxies decode are those of a whole-message encoding.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, toBinary } from '@bufbuild/protobuf';
import { anyPack, anyUnpack } from '@bufbuild/protobuf/wkt';
import { RouteConfigurationSchema, type RouteConfiguration } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { XdsCache } from '../../src/xds/cache.js';
import { sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { packRouteConfiguration } from '../../src/xds/generators/route-packing.js';
import { MESH, pushOf, serviceEntry, sidecarProxy, validated } from '../networking/fixtures.js';

function assertCanonical(config: RouteConfiguration): void {
  const packed = packRouteConfiguration(config);
  const expected = anyPack(RouteConfigurationSchema, config);
  assert.equal(packed.typeUrl, expected.typeUrl);
  assert.deepEqual(Buffer.from(packed.value), Buffer.from(expected.value), `the bytes of ${config.name}`);
  assert.deepEqual(anyUnpack(packed, RouteConfigurationSchema), config);
}

test('a sidecar route configuration, plain and routed by a VirtualService, packs to its canonical encoding', () => {
  const push = pushOf([
    ...MESH,
    serviceEntry('foo', 'web', { hosts: ['web.foo.svc.cluster.local'], addresses: ['10.96.0.30'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP' }] }),
    ...validated('routes', [
      {
        apiVersion: 'networking.mesh.io/v1',
        kind: 'VirtualService',
        metadata: { name: 'echo', namespace: 'foo' },
        spec: { hosts: ['echo.foo.svc.cluster.local'], http: [{ match: [{ uri: { prefix: '/v2' } }], route: [{ destination: { host: 'echo.foo.svc.cluster.local', port: { number: 80 } } }], timeout: '3s' }] },
      },
    ]),
  ]);
  const routes = sidecarRoutes(sidecarProxy('10.0.0.1', 'echo-1', 'foo'), push, undefined, false, new XdsCache(), { timeout: 15 });
  assert.ok(routes.length > 0 && routes.every((r) => r.virtualHosts.length > 0), 'configurations with hosts');
  assert.ok(routes.some((r) => r.virtualHosts.length >= 2), 'a configuration of several hosts');
  routes.forEach(assertCanonical);
});

test('fields on both sides of the virtual hosts, no hosts at all, and unknown fields keep the canonical order', () => {
  const base = sidecarRoutes(sidecarProxy('10.0.0.1', 'echo-1', 'foo'), pushOf(MESH), undefined, false, new XdsCache())[0]!;
  const full = create(RouteConfigurationSchema, {
    ...base,
    internalOnlyHeaders: ['x-internal'],
    validateClusters: false,
    requestHeadersToRemove: ['x-drop'],
    mostSpecificHeaderMutationsWins: true,
    ignorePortInHostMatching: true,
  });
  assertCanonical(full);
  assertCanonical(create(RouteConfigurationSchema, { name: 'empty', validateClusters: true }));
  assertCanonical(create(RouteConfigurationSchema, {}));
  // An unknown field (as a newer proto would carry) is written last by both.
  const unknown = create(RouteConfigurationSchema, { ...base, $unknown: [{ no: 999, wireType: 0, data: Uint8Array.of(7) }] });
  assert.deepEqual(Buffer.from(packRouteConfiguration(unknown).value), Buffer.from(toBinary(RouteConfigurationSchema, unknown)));
});

test('a host shared by two configurations is encoded into both', () => {
  const base = sidecarRoutes(sidecarProxy('10.0.0.1', 'echo-1', 'foo'), pushOf(MESH), undefined, false, new XdsCache())[0]!;
  const host = base.virtualHosts[0]!;
  const a = create(RouteConfigurationSchema, { name: 'a', virtualHosts: [host] });
  const b = create(RouteConfigurationSchema, { name: 'b', virtualHosts: [host, host] });
  assertCanonical(a);
  assertCanonical(b);
  assert.equal(anyUnpack(packRouteConfiguration(b), RouteConfigurationSchema)!.virtualHosts.length, 2);
});
