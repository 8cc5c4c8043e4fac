import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { crdOf, pluralOf, renderCrds } from '../../src/api/crds.js';
import { KINDS } from '../../src/api/types.js';
import { REPO_ROOT } from '../helpers/proc.js';

/** Structural-schema rules the orchestrator enforces: every node typed, no closed objects. */
function assertStructural(node: Record<string, unknown>, path: string): void {
  assert.equal(typeof node['type'], 'string', `${path} has no type`);
  assert.notEqual(node['additionalProperties'], false, `${path} has additionalProperties: false`);
  assert.ok(!(node['properties'] && node['additionalProperties']), `${path} has both properties and additionalProperties`);
  for (const [name, child] of Object.entries((node['properties'] ?? {}) as Record<string, Record<string, unknown>>)) {
    assertStructural(child, `${path}.${name}`);
  }
  if (node['items']) assertStructural(node['items'] as Record<string, unknown>, `${path}[]`);
  if (typeof node['additionalProperties'] === 'object') assertStructural(node['additionalProperties'] as Record<string, unknown>, `${path}{}`);
}

describe('CRDs', () => {
  it('deploy/crds.yaml is up to date with the schema source', () => {
    const onDisk = readFileSync(join(REPO_ROOT, 'deploy', 'crds.yaml'), 'utf8');
    assert.equal(onDisk, renderCrds(), 'run: npx tsx src/api/write-crds.ts');
  });

  it('has one CRD per kind with both versions served and v1 stored', () => {
    const docs = parseAllDocuments(renderCrds()).map((d) => d.toJS() as { metadata: { name: string }; spec: { versions: { name: string; served: boolean; storage: boolean }[] } });
    assert.equal(docs.length, KINDS.length);
    assert.equal(docs[1]!.metadata.name, 'authorizationpolicies.security.mesh.io');
    for (const d of docs) {
      assert.deepEqual(d.spec.versions.map((v) => [v.name, v.served, v.storage]), [['v1beta1', true, false], ['v1', true, true]]);
    }
  });

  it('schemas are structural', () => {
    for (const kind of KINDS) {
      const versions = (crdOf(kind)['spec'] as { versions: { schema: { openAPIV3Schema: Record<string, unknown> } }[] }).versions;
      assertStructural(versions[0]!.schema.openAPIV3Schema, kind);
    }
  });

  it('pluralizes like the orchestrator', () => {
    assert.equal(pluralOf('AuthorizationPolicy'), 'authorizationpolicies');
    assert.equal(pluralOf('Gateway'), 'gateways');
    assert.equal(pluralOf('ServiceEntry'), 'serviceentries');
  });
});
