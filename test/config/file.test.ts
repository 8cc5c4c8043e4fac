import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, beforeEach, describe, it } from 'node:test';
import type { AuthorizationPolicy } from '../../src/api/types.js';
import { counter } from '../../src/common/metrics.js';
import { FileConfigStore } from '../../src/config/file.js';
import type { ConfigEvent } from '../../src/config/store.js';
import { eventually } from '../helpers/proc.js';

function policyYaml(name: string, action = 'ALLOW', namespace = 'ns'): string {
  return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata:\n  name: ${name}\n  namespace: ${namespace}\nspec:\n  action: ${action}\n`;
}

const BAD_DOC = `apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: deny-all
  namespace: foo
spec:
  rules:
  - when:
    - key: request.auth.claims[groups]
      values: [a]
    - key: request.auth.claim[groups]
      values: [a]
`;

const key = (name: string, namespace = 'ns') => ({ kind: 'AuthorizationPolicy' as const, namespace, name });

async function rejectedTotal(): Promise<number> {
  const metric = await counter('pilot_total_rejected_configs').get();
  return metric.values.reduce((sum, v) => sum + v.value, 0);
}

describe('FileConfigStore', () => {
  let dir: string;
  let store: FileConfigStore;
  let events: ConfigEvent[];
  const roots: string[] = [];

  async function open(): Promise<void> {
    store = new FileConfigStore({ configDir: dir, debounceMs: 20 });
    events = [];
    store.onEvent((e) => events.push(e));
    await store.start();
  }

  const actionOf = (name: string) => (store.get(key(name)) as AuthorizationPolicy | undefined)?.spec.action;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'filestore-'));
    roots.push(dir);
  });
  afterEach(async () => {
    await store?.close();
  });
  after(async () => {
    for (const root of roots) await rm(root, { recursive: true, force: true });
  });

  it('loads multi-document files, keeping the good documents of a file with a bad one', async () => {
    const before = await rejectedTotal();
    await writeFile(join(dir, 'a.yaml'), `${policyYaml('one')}---\n${BAD_DOC}---\n${policyYaml('two')}`);
    await writeFile(join(dir, 'b.json'), JSON.stringify({ apiVersion: 'networking.mesh.io/v1', kind: 'WorkloadEntry', metadata: { name: 'vm' }, spec: { address: '10.0.0.1' } }));
    await open();
    assert.equal(store.hasSynced(), true);
    assert.deepEqual(store.list('AuthorizationPolicy').map((r) => r.metadata.name), ['one', 'two']);
    assert.equal(store.get({ kind: 'WorkloadEntry', namespace: 'default', name: 'vm' })?.spec.address, '10.0.0.1');
    assert.deepEqual(store.problems(), {
      'a.yaml': [
        `${join(dir, 'a.yaml')}: document 2 (line 9): AuthorizationPolicy/foo/deny-all: spec.rules[0].when[1].key: unknown key "request.auth.claim[groups]"; expected one of request.auth.claims[<name>], request.headers[<name>], request.auth.principal, request.auth.audiences, request.auth.presenter, source.ip, remote.ip, source.namespace, source.principal, destination.ip, destination.port, connection.sni`,
      ],
    });
    assert.equal(await rejectedTotal(), before + 1);
    assert.deepEqual(events.map((e) => e.type), ['add', 'add', 'add']);
  });

  it('picks up created, modified and deleted files; a modification is an update in place', async () => {
    await open();
    await writeFile(join(dir, 'p.yaml'), policyYaml('p'));
    await eventually(() => assert.ok(actionOf('p') === 'ALLOW', 'creation'));
    const created = store.get(key('p'))!;
    await writeFile(join(dir, 'p.yaml'), policyYaml('p', 'DENY'));
    await eventually(() => assert.ok(actionOf('p') === 'DENY', 'modification'));
    const updated = store.get(key('p'))!;
    assert.equal(updated.metadata.generation, (created.metadata.generation ?? 0) + 1);
    assert.notEqual(updated.metadata.resourceVersion, created.metadata.resourceVersion);
    await rm(join(dir, 'p.yaml'));
    await eventually(() => assert.ok(store.get(key('p')) === undefined, 'deletion'));
    assert.deepEqual(events.map((e) => e.type), ['add', 'update', 'delete']);
    assert.equal(events[1]!.old?.metadata.resourceVersion, created.metadata.resourceVersion);
  });

  it('treats a rename as no change, and a rename out of the watched extensions as a delete', async () => {
    await writeFile(join(dir, 'p.yaml'), policyYaml('p'));
    await writeFile(join(dir, 'marker.yaml'), policyYaml('m1'));
    await open();
    await rename(join(dir, 'p.yaml'), join(dir, 'q.yml'));
    // A later marker file proves the rename was processed (rescans run in order).
    await writeFile(join(dir, 'marker.yaml'), policyYaml('m2'));
    await eventually(() => assert.ok(store.get(key('m2')) !== undefined, 'marker after rename'));
    assert.equal(actionOf('p'), 'ALLOW');
    assert.deepEqual(events.filter((e) => e.type !== 'add' || e.new.metadata.name === 'p').map((e) => `${e.type}`), ['add', 'delete']);
    assert.equal(events.find((e) => e.type === 'delete')?.old.metadata.name, 'm1');
    await rename(join(dir, 'q.yml'), join(dir, 'q.txt'));
    await eventually(() => assert.ok(store.get(key('p')) === undefined, 'rename to .txt'));
  });

  it('keeps the last good resources of a file saved broken, and applies the fix', async () => {
    await writeFile(join(dir, 'p.yaml'), `${policyYaml('p')}---\n${policyYaml('r')}`);
    await writeFile(join(dir, 'other.yaml'), policyYaml('o'));
    await open();
    const before = await rejectedTotal();
    await writeFile(join(dir, 'p.yaml'), `${policyYaml('p', 'DENY')}---\nkind: [broken\n`);
    await eventually(() => assert.ok(store.problems()['p.yaml'] !== undefined, 'rejection of the broken save'));
    assert.equal(actionOf('p'), 'DENY', 'the good document of the file is applied');
    assert.equal(actionOf('r'), 'ALLOW', 'the broken document keeps its last good resource');
    assert.equal(actionOf('o'), 'ALLOW', 'other files are untouched');
    assert.match(store.problems()['p.yaml']![0]!, /p\.yaml: document 2 \(line 9\): invalid YAML/);
    assert.equal(await rejectedTotal(), before + 1);
    // Invalid but parsable: still kept.
    await writeFile(join(dir, 'p.yaml'), `${policyYaml('p', 'DENY')}---\n${policyYaml('r', 'PERMIT')}`);
    await eventually(() => assert.ok(store.problems()['p.yaml']?.[0]?.includes('PERMIT') === true, 'semantic rejection'));
    assert.equal(actionOf('r'), 'ALLOW');
    await writeFile(join(dir, 'p.yaml'), policyYaml('p', 'DENY'));
    await eventually(() => assert.ok(store.get(key('r')) === undefined, 'the fixed file drops r'));
    assert.deepEqual(store.problems(), {});
    assert.equal(actionOf('o'), 'ALLOW');
  });

  it('resolves a key defined by two files to the first path, and falls back when it goes', async () => {
    await writeFile(join(dir, 'a.yaml'), policyYaml('p', 'DENY'));
    await writeFile(join(dir, 'b.yaml'), policyYaml('p', 'AUDIT'));
    await open();
    assert.equal(actionOf('p'), 'DENY');
    await rm(join(dir, 'a.yaml'));
    await eventually(() => assert.ok(actionOf('p') === 'AUDIT', 'fallback to b.yaml'));
    assert.deepEqual(events.map((e) => e.type), ['add', 'update']);
  });

  it('reads subdirectories, including ones created later, and ignores hidden files', async () => {
    await mkdir(join(dir, 'sub'));
    await writeFile(join(dir, 'sub', 'a.yaml'), policyYaml('a'));
    await writeFile(join(dir, '.hidden.yaml'), policyYaml('hidden'));
    await open();
    assert.deepEqual(store.list('AuthorizationPolicy').map((r) => r.metadata.name), ['a']);
    await mkdir(join(dir, 'later'));
    await writeFile(join(dir, 'later', 'b.yaml'), policyYaml('b'));
    await eventually(() => assert.ok(store.get(key('b')) !== undefined, 'file in a new subdirectory'));
  });

  it('rejects a policy whose when key is __proto__ alone, naming it; the rest applies, edits and revocations included', async () => {
    await writeFile(join(dir, '01-bad.yaml'), `${policyYaml('bad')}  rules:\n  - when:\n    - key: __proto__\n      values: [admins]\n`);
    await writeFile(join(dir, '02-allow.yaml'), policyYaml('allow'));
    await open();
    assert.equal(actionOf('allow'), 'ALLOW');
    assert.equal(actionOf('bad'), undefined);
    assert.match(store.problems()['01-bad.yaml']![0]!, /01-bad\.yaml: document 1 \(line 1\): AuthorizationPolicy\/ns\/bad: spec\.rules\[0\]\.when\[0\]\.key: unknown key "__proto__"/);
    await writeFile(join(dir, '02-allow.yaml'), policyYaml('allow', 'DENY'));
    await eventually(() => assert.equal(actionOf('allow'), 'DENY'));
    await writeFile(join(dir, '03-new.yaml'), `${policyYaml('new')}  rules:\n  - when:\n    - key: request.auth.claims[__proto__]\n      values: [admins]\n`);
    await eventually(() => assert.equal(actionOf('new'), 'ALLOW'));
    await rm(join(dir, '02-allow.yaml'));
    await eventually(() => assert.equal(actionOf('allow'), undefined));
  });

  it('refuses a missing directory with a message naming it', async () => {
    store = new FileConfigStore({ configDir: join(dir, 'nope') });
    await assert.rejects(store.start(), /--configDir .*nope: no such directory/);
  });
});
