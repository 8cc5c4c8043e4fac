// Keys and shapes a document may carry that name JavaScript's object machinery: each is either
// read as plain data or rejected with the offending key named, and never breaks the validator.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseDocuments } from '../../src/api/parse.js';
import { validateResource } from '../../src/api/validate.js';
import { readResources } from '../../src/config/documents.js';

const PROTOTYPE_NAMES = ['constructor', 'prototype', 'hasOwnProperty', 'toString', 'valueOf', '__proto__'];

function policy(spec: string, labels = ''): string {
  return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata:\n  name: p\n  namespace: ns\n${labels}spec:\n${spec}`;
}

function only(text: string): { messages: string[]; accepted: number } {
  const { resources, rejections } = readResources('f.yaml', text);
  return { messages: rejections.flatMap((r) => r.messages), accepted: resources.length };
}

describe('hostile keys', () => {
  for (const name of PROTOTYPE_NAMES) {
    it(`rejects the when key ${JSON.stringify(name)} as an unknown key, naming it`, () => {
      const { messages, accepted } = only(policy(`  rules:\n  - when:\n    - key: ${name}\n      values: [admins]\n`));
      assert.equal(accepted, 0);
      assert.deepEqual(messages, [
        `f.yaml: document 1 (line 1): AuthorizationPolicy/ns/p: spec.rules[0].when[0].key: unknown key ${JSON.stringify(name)}; expected one of request.auth.claims[<name>], request.headers[<name>], request.auth.principal, request.auth.audiences, request.auth.presenter, source.ip, remote.ip, source.namespace, source.principal, destination.ip, destination.port, connection.sni`,
      ]);
    });

    it(`accepts a claim named ${JSON.stringify(name)}: claim names are data`, () => {
      const result = validateResource(parseDocuments(policy(`  rules:\n  - when:\n    - key: request.auth.claims[${name}]\n      values: [admins]\n`))[0]!.value);
      assert.ok(result.ok, JSON.stringify(result));
      assert.equal(result.resource.kind === 'AuthorizationPolicy' && result.resource.spec.rules?.[0]?.when?.[0]?.key, `request.auth.claims[${name}]`);
    });
  }

  for (const name of PROTOTYPE_NAMES.filter((n) => n !== '__proto__')) {
    it(`keeps the label ${JSON.stringify(name)} as an ordinary own label`, () => {
      const result = validateResource(parseDocuments(policy(`  selector:\n    matchLabels:\n      ${name}: a\n`, `  labels:\n    ${name}: b\n`))[0]!.value);
      assert.ok(result.ok, JSON.stringify(result));
      assert.equal(result.resource.metadata.labels?.[name], 'b');
      assert.ok(Object.hasOwn(result.resource.metadata.labels!, name));
    });
  }

  const protoPlaces: [string, string][] = [
    ['spec', policy('  __proto__:\n    action: DENY\n')],
    ['spec.rules[0].from[0].source', policy('  rules:\n  - from:\n    - source:\n        __proto__: [x]\n')],
    ['metadata.labels', policy('  {}\n', '  labels:\n    __proto__: x\n')],
    ['spec.selector.matchLabels', policy('  selector:\n    matchLabels:\n      __proto__: x\n')],
  ];
  for (const [at, text] of protoPlaces) {
    it(`rejects a YAML mapping key __proto__ in ${at}, naming the field`, () => {
      const { messages, accepted } = only(text);
      assert.equal(accepted, 0);
      assert.deepEqual(messages, [`f.yaml: document 1 (line 1): AuthorizationPolicy/ns/p: ${at}.__proto__: key "__proto__" is not allowed: it names the object prototype, and no field, label or map key of a resource is spelled so`]);
    });
  }

  it('rejects __proto__ in JSON too, and the objects it came in are not re-prototyped', () => {
    const text = '{"apiVersion":"security.mesh.io/v1beta1","kind":"AuthorizationPolicy","metadata":{"name":"p","namespace":"ns"},"spec":{"__proto__":{"action":"DENY"}}}';
    const { messages } = only(text);
    assert.match(messages[0]!, /spec\.__proto__: key "__proto__" is not allowed/);
    assert.equal(({} as { action?: string }).action, undefined);
  });

  it('rejects values YAML tags turn into non-data objects, naming the field', () => {
    const { messages } = only(policy('  rules: !!set {a, b}\n'));
    assert.deepEqual(messages, ['f.yaml: document 1 (line 1): AuthorizationPolicy/ns/p: spec.rules: expected plain data (a map, a list or a scalar), got a Set; YAML tags such as !!set, !!binary or !!timestamp are not accepted']);
    assert.match(only(policy('  action: !custom DENY\n')).messages[0]!, /^f\.yaml: document 1 \(line 1\): invalid YAML: Unresolved tag: !custom/);
  });

  it('rejects a document nested deeper than any resource, and one too deep to parse', () => {
    const deep = `${'['.repeat(80)}${']'.repeat(80)}`;
    assert.match(only(policy(`  rules: ${deep}\n`)).messages[0]!, /AuthorizationPolicy\/ns\/p: spec\.rules(\[0\])+: nested deeper than 64 levels/);
    assert.match(only(`${'['.repeat(100_000)}${']'.repeat(100_000)}`).messages[0]!, /^f\.yaml: document 1 \(line 1\): invalid YAML: /);
  });

  it('keeps the other documents of the file', () => {
    const good = policy('  action: DENY\n').replace('name: p', 'name: good');
    const { resources, rejections } = readResources('f.yaml', `${policy('  rules:\n  - when:\n    - key: __proto__\n      values: [a]\n')}---\n${good}`);
    assert.deepEqual(resources.map((r) => r.metadata.name), ['good']);
    assert.equal(rejections.length, 1);
  });
});
