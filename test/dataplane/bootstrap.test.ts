// Loading the proxy's bootstrap: JSON or YAML in Envoy's mapping, --config-yaml merged over the
// file, --service-cluster/--service-node, and errors that name the source and field.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { BootstrapError, loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { bootstrapJson } from './xds-fixtures.js';

const dir = mkdtempSync(join(tmpdir(), 'mesh-bootstrap-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string): string {
  const p = join(dir, name);
  writeFileSync(p, content);
  return p;
}

describe('loadBootstrap', () => {
  it('reads the JSON the agent writes', () => {
    const b = loadBootstrap({ path: file('b.json', JSON.stringify(bootstrapJson(15010, 15000))) });
    assert.equal(b.node.id, 'sidecar~127.0.0.1~app-1.default~default.svc.cluster.local');
    assert.deepEqual(b.admin, { host: '127.0.0.1', port: 15000 });
    assert.equal(b.xdsAddress, '127.0.0.1:15010');
    assert.equal(b.xdsCluster, 'xds-grpc');
    assert.deepEqual([b.lds, b.cds], [true, true]);
    assert.equal(b.staticClusters.length, 1);
  });

  it('reads YAML, merges --config-yaml over it, and applies --service-cluster/--service-node', () => {
    const path = file('b.yaml', stringify(bootstrapJson(15010, 15000)));
    const b = loadBootstrap({ path, yaml: 'admin: {address: {socket_address: {port_value: 16000}}}\nnode: {metadata: {EXTRA: "1"}}', serviceCluster: 'c1', serviceNode: 'n1' });
    assert.deepEqual(b.admin, { host: '127.0.0.1', port: 16000 });
    assert.equal(b.node.cluster, 'c1');
    assert.equal(b.node.id, 'n1');
    assert.deepEqual(Object.keys(b.node.metadata ?? {}).sort(), ['EXTRA', 'NAMESPACE']);
  });

  it('names the file and the field of what is wrong', () => {
    const cases: Array<[string, (b: Record<string, any>) => void, RegExp]> = [
      ['no-node.json', (b) => delete b.node, /no-node\.json: node\.id: required/],
      ['no-admin.json', (b) => delete b.admin, /no-admin\.json: admin\.address: a socket_address is required/],
      ['no-ads.json', (b) => delete b.dynamic_resources.ads_config, /dynamic_resources\.ads_config: required/],
      ['delta.json', (b) => (b.dynamic_resources.ads_config.api_type = 'DELTA_GRPC'), /api_type: DELTA_GRPC is not supported/],
      ['bad-cluster.json', (b) => (b.static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value = undefined), /static_resources\.clusters\[0\]\.load_assignment\.endpoints\[0\]\.lb_endpoints\[0\]\.endpoint\.address\.socket_address: port_value is required/],
      ['typo.json', (b) => (b.dynamic_resourcez = {}), /typo\.json: .*dynamic_resourcez/],
    ];
    for (const [name, mutate, re] of cases) {
      const b = bootstrapJson(15010, 15000) as Record<string, any>;
      mutate(b);
      assert.throws(() => loadBootstrap({ path: file(name, JSON.stringify(b)) }), (e: unknown) => e instanceof BootstrapError && re.test(e.message), name);
    }
    assert.throws(() => loadBootstrap({ path: file('broken.json', '{') }), /broken\.json: not valid JSON/);
    assert.throws(() => loadBootstrap({ path: join(dir, 'absent.json') }), /cannot read bootstrap .*absent\.json: ENOENT/);
  });
});
