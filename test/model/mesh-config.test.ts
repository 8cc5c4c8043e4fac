// The discovery server's mesh config: pathNormalization read from the file, into every HTTP
// connection manager the builders emit, as the production mesh sets the three HCM fields.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MeshConfigError, parseMeshConfig } from '../../src/model/mesh-config.js';
import { httpConnectionManager, type PathNormalization } from '../../src/networking/common.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { toEnvoyJson, unpack } from '../../src/envoy/types.js';

test('pathNormalization: absent, DEFAULT and each mode; other fields are reported as not effective', () => {
  const empty = parseMeshConfig('', 'mesh');
  assert.equal(empty.pathNormalization, 'BASE');
  assert.deepEqual(empty.notEffective, []);
  assert.equal(empty.extensionProviders.authorizers.size, 0);
  assert.equal(empty.enableAutoMtls, true);
  assert.deepEqual(empty.trustDomainAliases, []);
  assert.equal(parseMeshConfig('pathNormalization: {normalization: DEFAULT}', 'mesh').pathNormalization, 'BASE');
  for (const mode of ['NONE', 'BASE', 'MERGE_SLASHES', 'DECODE_AND_MERGE_SLASHES']) {
    assert.equal(parseMeshConfig(`pathNormalization:\n  normalization: ${mode}\n`, 'mesh').pathNormalization, mode);
  }
  assert.deepEqual(parseMeshConfig('enableTracing: true\naccessLogFile: /dev/stdout\nenableEnvoyAccessLogService: true\n', 'mesh').notEffective, ['enableEnvoyAccessLogService', 'enableTracing']);
});

test('enableAutoMtls (default true) and trustDomainAliases are read and effective; bad values name the field', () => {
  const m = parseMeshConfig('enableAutoMtls: false\ntrustDomainAliases: [old.example, legacy]\n', 'mesh');
  assert.deepEqual({ auto: m.enableAutoMtls, aliases: m.trustDomainAliases, notEffective: m.notEffective }, { auto: false, aliases: ['old.example', 'legacy'], notEffective: [] });
  assert.throws(() => parseMeshConfig('enableAutoMtls: "yes"', 'm'), /m: enableAutoMtls: expected true or false, got "yes"/);
  assert.throws(() => parseMeshConfig('trustDomainAliases: old.example', 'm'), /m: trustDomainAliases: expected a list of trust domain names/);
  assert.throws(() => parseMeshConfig('trustDomainAliases: ["spiffe://x/y"]', 'm'), /trustDomainAliases: expected a list/);
});

test('trustDomain: absent by default (TRUST_DOMAIN then applies), read and effective; a name SPIFFE does not allow names the field', () => {
  assert.equal(parseMeshConfig('', 'mesh').trustDomain, undefined);
  const m = parseMeshConfig('trustDomain: corp.example\n', 'mesh');
  assert.deepEqual([m.trustDomain, m.notEffective], ['corp.example', []]);
  for (const bad of ['""', 'Corp.Example', '"a/b"', '42', '[x]']) assert.throws(() => parseMeshConfig(`trustDomain: ${bad}`, 'm'), /^Error: m: trustDomain: expected a SPIFFE trust domain name/);
});

test('h2UpgradePolicy: DO_NOT_UPGRADE by default, UPGRADE read and effective; another value names the field', () => {
  assert.equal(parseMeshConfig('', 'mesh').h2Upgrade, false);
  assert.equal(parseMeshConfig('h2UpgradePolicy: DO_NOT_UPGRADE', 'mesh').h2Upgrade, false);
  const up = parseMeshConfig('h2UpgradePolicy: UPGRADE', 'mesh');
  assert.deepEqual([up.h2Upgrade, up.notEffective], [true, []]);
  assert.throws(() => parseMeshConfig('h2UpgradePolicy: SOMETIMES', 'm'), /m: h2UpgradePolicy: "SOMETIMES" is not one of DO_NOT_UPGRADE, UPGRADE/);
});

test('tcpKeepalive: read and effective; a bad count, duration or field names it', () => {
  assert.equal(parseMeshConfig('', 'mesh').tcpKeepalive, undefined);
  const k = parseMeshConfig('tcpKeepalive: {time: 600s, interval: 75s, probes: 3}', 'mesh');
  assert.deepEqual([k.tcpKeepalive, k.notEffective], [{ probes: 3, time: '600s', interval: '75s' }, []]);
  assert.deepEqual(parseMeshConfig('tcpKeepalive: {time: 1m}', 'mesh').tcpKeepalive, { time: '1m' });
  assert.throws(() => parseMeshConfig('tcpKeepalive: {probes: -1}', 'm'), /m: tcpKeepalive\.probes: -1 is not a non-negative integer/);
  assert.throws(() => parseMeshConfig('tcpKeepalive: {time: soon}', 'm'), /m: tcpKeepalive\.time: "soon" is not a positive duration/);
  assert.throws(() => parseMeshConfig('tcpKeepalive: {interval: 0s}', 'm'), /m: tcpKeepalive\.interval: "0s" is not a positive duration/);
  assert.throws(() => parseMeshConfig('tcpKeepalive: {idle: 5s}', 'm'), /m: tcpKeepalive: unknown field idle/);
  assert.throws(() => parseMeshConfig('tcpKeepalive: 5s', 'm'), /m: tcpKeepalive: expected a mapping/);
});

test('an invalid mesh config is an error naming the file, the field and the value', () => {
  assert.throws(() => parseMeshConfig('pathNormalization: {normalization: SLASHES}', '/etc/mesh'), (e: unknown) => e instanceof MeshConfigError && /\/etc\/mesh: pathNormalization\.normalization: "SLASHES" is not one of DEFAULT, NONE, BASE/.test(e.message));
  assert.throws(() => parseMeshConfig('pathNormalization: BASE', 'm'), /pathNormalization: expected a mapping/);
  assert.throws(() => parseMeshConfig('- a', 'm'), /expected a mapping of mesh config fields/);
  assert.throws(() => parseMeshConfig('a: [', 'm'), /not valid YAML/);
});

test('each mode sets normalize_path, merge_slashes and path_with_escaped_slashes_action as the production mesh', () => {
  const fields = (mode?: PathNormalization) => {
    const hcm = toEnvoyJson(HttpConnectionManagerSchema, unpack(httpConnectionManager('s', { rds: 'r' }, [], mode), HttpConnectionManagerSchema)) as Record<string, unknown>;
    return { normalize_path: hcm.normalize_path, merge_slashes: hcm.merge_slashes, action: hcm.path_with_escaped_slashes_action };
  };
  assert.deepEqual(fields(), { normalize_path: true, merge_slashes: undefined, action: 'KEEP_UNCHANGED' });
  assert.deepEqual(fields('NONE'), { normalize_path: false, merge_slashes: undefined, action: 'KEEP_UNCHANGED' });
  assert.deepEqual(fields('MERGE_SLASHES'), { normalize_path: true, merge_slashes: true, action: 'KEEP_UNCHANGED' });
  assert.deepEqual(fields('DECODE_AND_MERGE_SLASHES'), { normalize_path: true, merge_slashes: true, action: 'UNESCAPE_AND_FORWARD' });
});

test('localityLbSetting (default enabled): enabled, failover, failoverPriority and distribute are read; bad values name the field', () => {
  assert.deepEqual(parseMeshConfig('', 'mesh').localityLbSetting, { enabled: true });
  const m = parseMeshConfig('localityLbSetting:\n  failover: [{from: us-east, to: us-west}]\n  failoverPriority: [topology.istio.io/network]\n', 'mesh');
  assert.deepEqual(m.localityLbSetting, { enabled: true, failover: [{ from: 'us-east', to: 'us-west' }], failoverPriority: ['topology.istio.io/network'] });
  assert.deepEqual(m.notEffective, []);
  assert.deepEqual(parseMeshConfig('localityLbSetting: {enabled: false}', 'mesh').localityLbSetting, { enabled: false });
  const d = parseMeshConfig('localityLbSetting:\n  distribute: [{from: "a/*", to: {"a/*": 70, "b/*": 30}}]\n', 'mesh');
  assert.deepEqual([d.localityLbSetting, d.notEffective], [{ enabled: true, distribute: [{ from: 'a/*', to: { 'a/*': 70, 'b/*': 30 } }] }, []]);
  assert.throws(() => parseMeshConfig('localityLbSetting:\n  distribute: [{from: "a/*", to: {"a/*": 70}}]\n', 'm'), /m: localityLbSetting\.distribute\[0\]\.to: the shares must add up to 100, got 70/);
  assert.throws(() => parseMeshConfig('localityLbSetting:\n  distribute: [{to: {"a/*": 100}}]\n', 'm'), /m: localityLbSetting\.distribute\[0\]: expected \{from/);
  assert.throws(() => parseMeshConfig('localityLbSetting: {enabled: "yes"}', 'm'), /m: localityLbSetting\.enabled: expected true or false, got "yes"/);
  assert.throws(() => parseMeshConfig('localityLbSetting: {failover: [{from: a, to: a}]}', 'm'), /m: localityLbSetting\.failover\[0\]: expected two different regions/);
  assert.throws(() => parseMeshConfig('localityLbSetting: {failoverPriority: [""]}', 'm'), /localityLbSetting\.failoverPriority: expected a list of label names/);
  assert.throws(() => parseMeshConfig('localityLbSetting: {failovr: []}', 'm'), /m: localityLbSetting\.failovr: unknown field/);
  assert.throws(() => parseMeshConfig('localityLbSetting: {failover: [{from: a, to: b}], distribute: [{from: a, to: {b: 100}}]}', 'm'), /distribute and failover cannot both be set/);
});

test('rootNamespace: mesh-system unless set; a name that is not a namespace refuses the mesh config', () => {
  assert.equal(parseMeshConfig('', 'mesh').rootNamespace, 'mesh-system');
  const m = parseMeshConfig('rootNamespace: istio-system\n', 'mesh');
  assert.deepEqual([m.rootNamespace, m.notEffective], ['istio-system', []]);
  assert.throws(() => parseMeshConfig('rootNamespace: Mesh_System\n', 'm'), /^Error: m: rootNamespace: invalid namespace "Mesh_System"; expected a DNS label/);
  assert.throws(() => parseMeshConfig('rootNamespace: [a]\n', 'm'), /^Error: m: rootNamespace: expected a namespace name, got \["a"\]$/);
});
