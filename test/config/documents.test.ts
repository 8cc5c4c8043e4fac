import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readResources } from '../../src/config/documents.js';

const policy = (name: string) => `apiVersion: security.mesh.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: ${name}\nspec: {}\n`;

describe('readResources', () => {
  it('keeps the first of two documents with the same key and rejects the second', () => {
    const { resources, rejections } = readResources('f.yaml', `${policy('a')}---\n${policy('a')}`);
    assert.equal(resources.length, 1);
    assert.deepEqual(rejections, [{ kind: 'AuthorizationPolicy', messages: ['f.yaml: document 2 (line 7): AuthorizationPolicy/default/a: duplicate of document 1 in the same file; the first one is used'] }]);
  });

  it('rejects unparsable YAML and unknown kinds, labelled for the metric', () => {
    const { resources, rejections } = readResources('f.yaml', `a: [\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s\n---\n${policy('ok')}`);
    assert.deepEqual(resources.map((r) => r.metadata.name), ['ok']);
    assert.deepEqual(rejections.map((r) => r.kind), ['unknown', 'Service']);
    assert.match(rejections[0]!.messages[0]!, /^f\.yaml: document 1 \(line 1\): invalid YAML: /);
    assert.match(rejections[1]!.messages[0]!, /^f\.yaml: document 2 \(line 3\): kind: unknown kind "Service"; expected one of RequestAuthentication, /);
  });
});
