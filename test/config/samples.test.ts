import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { readResources } from '../../src/config/documents.js';
import { REPO_ROOT } from '../helpers/proc.js';

const samples = join(REPO_ROOT, 'samples');

describe('samples', () => {
  for (const file of readdirSync(join(samples, 'config')).filter((f) => f.endsWith('.yaml'))) {
    it(`samples/config/${file} is valid`, () => {
      const { resources, rejections } = readResources(`samples/config/${file}`, readFileSync(join(samples, 'config', file), 'utf8'));
      assert.deepEqual(rejections, []);
      assert.ok(resources.length > 0);
    });
  }

  it('samples/invalid/bad.yaml loads its good document and reports every error of the bad one', () => {
    const { resources, rejections } = readResources('samples/invalid/bad.yaml', readFileSync(join(samples, 'invalid', 'bad.yaml'), 'utf8'));
    assert.deepEqual(resources.map((r) => r.metadata.name), ['allow-nothing']);
    assert.deepEqual(rejections, [
      {
        kind: 'AuthorizationPolicy',
        messages: [
          'samples/invalid/bad.yaml: document 2 (line 10): AuthorizationPolicy/foo/deny-all: spec.rules[0].from[0].source.requestPrincipals[0]: must not be empty',
          'samples/invalid/bad.yaml: document 2 (line 10): AuthorizationPolicy/foo/deny-all: spec.rules[0].when[1].key: unknown key "request.auth.claim[groups]"; expected one of request.auth.claims[<name>], request.headers[<name>], request.auth.principal, request.auth.audiences, request.auth.presenter, source.ip, remote.ip, source.namespace, source.principal, destination.ip, destination.port, connection.sni',
        ],
      },
    ]);
  });
});
