// Push scope: each registered xDS type's rule, and the push a trigger makes of them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { PushTrigger } from '../../src/xds/push-scope.js';
import { pushFor, workloadAddresses } from '../../src/xds/push-scope.js';
import { MESH_XDS_TYPES, type XdsType } from '../../src/xds/generators/index.js';
import { cds } from '../../src/xds/generators/cds.js';
import { eds } from '../../src/xds/generators/eds.js';
import { lds } from '../../src/xds/generators/lds.js';
import { nds } from '../../src/xds/generators/nds.js';
import { rds } from '../../src/xds/generators/rds.js';
import { sds } from '../../src/xds/generators/sds.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { authorizationPolicy, serviceEntry, sidecar, workloadEntry } from '../networking/fixtures.js';

const config = (kind: string): PushTrigger => ({ source: 'config', kind });
const TRIGGERS: Record<string, PushTrigger> = {
  AuthorizationPolicy: config('AuthorizationPolicy'),
  RequestAuthentication: config('RequestAuthentication'),
  PeerAuthentication: config('PeerAuthentication'),
  Sidecar: config('Sidecar'),
  Telemetry: config('Telemetry'),
  ServiceEntry: config('ServiceEntry'),
  WorkloadEntry: config('WorkloadEntry'),
  WorkloadGroup: config('WorkloadGroup'),
  service: { source: 'service' },
  endpoints: { source: 'endpoints' },
  headlessEndpoints: { source: 'endpoints', headless: true },
  jwks: { source: 'jwks', uri: 'https://issuer.example/jwks' },
  credential: { source: 'credential', namespace: 'gw', name: 'site' },
};

/** The triggers that push a type, by the names above. */
function pushedBy(t: XdsType): string[] {
  return Object.entries(TRIGGERS).filter(([, trigger]) => t.pushedBy(trigger)).map(([name]) => name);
}

test('LDS: policies, Telemetry, JWKS, services and other config; not endpoints nor registry-handled kinds', () => {
  assert.deepEqual(pushedBy(lds), ['AuthorizationPolicy', 'RequestAuthentication', 'PeerAuthentication', 'Sidecar', 'Telemetry', 'service', 'jwks']);
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.Telemetry!), { reason: 'config', types: new Set([TypeUrl.Listener]) }, 'access loggers and stats filters live in listeners only, as the Go mesh skips Telemetry for the other types');
});

test('RDS and CDS: services and non-policy config; CDS also PeerAuthentication (auto mTLS follows it)', () => {
  assert.deepEqual(pushedBy(rds), ['Sidecar', 'service']);
  assert.deepEqual(pushedBy(cds), ['PeerAuthentication', 'Sidecar', 'service']);
});

test('EDS: services, non-policy config and endpoint changes', () => {
  assert.deepEqual(pushedBy(eds), ['Sidecar', 'service', 'endpoints', 'headlessEndpoints']);
});

test('NDS: services, non-policy config, and the endpoints of headless services only (their hosts resolve to them)', () => {
  assert.deepEqual(pushedBy(nds), ['Sidecar', 'service', 'headlessEndpoints']);
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.headlessEndpoints!), { reason: 'endpoint', types: new Set([TypeUrl.ClusterLoadAssignment, TypeUrl.NameTable]), endpointsOnly: true });
});

test('registered types: the four Envoy types in make-before-break order, then the DNS name table and credential secrets', () => {
  assert.deepEqual(MESH_XDS_TYPES.map((t) => t.typeUrl), [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration, TypeUrl.NameTable, TypeUrl.Secret]);
});

test('SDS: only credential changes; a credential change pushes SDS alone', () => {
  assert.deepEqual(pushedBy(sds), ['credential']);
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.credential!), { reason: 'secret:gw/site', types: new Set([TypeUrl.Secret]) });
});

test('pushFor: the types whose rule says yes; all of them = every type; none = no push', () => {
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.AuthorizationPolicy!), { reason: 'config', types: new Set([TypeUrl.Listener]) });
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.jwks!), { reason: 'jwks:https://issuer.example/jwks', types: new Set([TypeUrl.Listener]) });
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.endpoints!), { reason: 'endpoint', types: new Set([TypeUrl.ClusterLoadAssignment]), endpointsOnly: true });
  const allButSecrets = new Set(MESH_XDS_TYPES.map((t) => t.typeUrl).filter((u) => u !== TypeUrl.Secret));
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.service!), { reason: 'service', types: allButSecrets });
  assert.deepEqual(pushFor(MESH_XDS_TYPES, TRIGGERS.Sidecar!), { reason: 'config', types: allButSecrets });
  assert.deepEqual(pushFor([cds, eds, lds, rds], TRIGGERS.service!), { reason: 'service' });
  assert.equal(pushFor(MESH_XDS_TYPES, TRIGGERS.ServiceEntry!), undefined);
  assert.equal(pushFor(MESH_XDS_TYPES, TRIGGERS.WorkloadGroup!), undefined);
});

test('a newly registered type is asked too: its rule decides whether it joins a push', () => {
  const nameTable: XdsType = {
    typeUrl: 'type.googleapis.com/mesh.v1.dns.NameTable',
    pushedBy: (t) => t.source === 'service',
    generator: () => ({ generate: () => [] }),
  };
  const types = [cds, eds, lds, rds, nameTable];
  assert.deepEqual(pushFor(types, TRIGGERS.service!), { reason: 'service' });
  assert.deepEqual(pushFor(types, TRIGGERS.Sidecar!), { reason: 'config', types: new Set([cds, eds, lds, rds].map((t) => t.typeUrl)) });
});

test('workloadAddresses: old and new addresses of a WorkloadEntry; nothing for other kinds', () => {
  const before = workloadEntry('foo', 'vm', { address: '10.0.0.1' });
  const after = workloadEntry('foo', 'vm', { address: '10.0.0.2' });
  assert.deepEqual(workloadAddresses({ type: 'update', old: before, new: after }), ['10.0.0.1', '10.0.0.2']);
  assert.deepEqual(workloadAddresses({ type: 'delete', old: before }), ['10.0.0.1']);
  assert.deepEqual(workloadAddresses({ type: 'add', new: serviceEntry('foo', 'se', { hosts: ['a.example'] }) }), []);
  assert.deepEqual(workloadAddresses({ type: 'add', new: authorizationPolicy('foo', 'p', {}) }), []);
  assert.deepEqual(workloadAddresses({ type: 'add', new: sidecar('foo', 's', {}) }), []);
});
