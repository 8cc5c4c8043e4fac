// What editors, `kubectl cp`, `git checkout` and the orchestrator's ConfigMap mounts do to a config
// directory, each followed by an edit and a delete that must still apply. The periodic rescan is
// set far beyond the test's duration, so every change here is seen by a watch.
import assert from 'node:assert/strict';
import { copyFile, mkdir, mkdtemp, open, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import type { AuthorizationPolicy } from '../../src/api/types.js';
import { FileConfigStore } from '../../src/config/file.js';
import { eventually } from '../helpers/proc.js';

function policy(name: string, action = 'ALLOW'): string {
  return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata:\n  name: ${name}\n  namespace: ns\nspec:\n  action: ${action}\n`;
}

const HOUR_MS = 3_600_000;
/** For the one test of the periodic rescan itself. */
const RESCAN_MS = 300;

describe('FileConfigStore watch: the sequences tools produce', () => {
  const roots: string[] = [];
  let store: FileConfigStore | undefined;
  let dir: string;

  async function openStore(configDir = dir): Promise<FileConfigStore> {
    store = new FileConfigStore({ configDir, debounceMs: 20, rescanIntervalMs: HOUR_MS });
    await store.start();
    return store;
  }
  const actionOf = (name: string) => (store!.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name }) as AuthorizationPolicy | undefined)?.spec.action;
  const applies = (name: string, action: string | undefined, what: string) => eventually(() => assert.equal(actionOf(name), action, what));

  /** After any sequence: an in-place edit, then the deletion, of `file` (holding policy `name`). */
  async function editAndDeleteApply(file: string, name: string): Promise<void> {
    await writeFile(join(dir, file), policy(name, 'AUDIT'));
    await applies(name, 'AUDIT', `edit of ${file} after the sequence`);
    await rm(join(dir, file));
    await applies(name, undefined, `deletion of ${file} after the sequence`);
  }

  async function fresh(): Promise<void> {
    dir = await mkdtemp(join(tmpdir(), 'pipeline-watch-'));
    roots.push(dir);
  }

  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  after(async () => {
    for (const root of roots) await rm(root, { recursive: true, force: true });
  });

  it('rm then cp of the same name (the file re-created)', async () => {
    await fresh();
    await writeFile(join(dir, '02-allow.yaml'), policy('allow'));
    await writeFile(join(dir, 'other.src'), policy('allow', 'DENY'));
    await openStore();
    await rm(join(dir, '02-allow.yaml'));
    await copyFile(join(dir, 'other.src'), join(dir, '02-allow.yaml'));
    await applies('allow', 'DENY', 're-created file');
    await editAndDeleteApply('02-allow.yaml', 'allow');
  });

  it('an editor writing a temp file and renaming it over', async () => {
    await fresh();
    await writeFile(join(dir, 'p.yaml'), policy('p'));
    await openStore();
    await writeFile(join(dir, '.p.yaml.tmp-1234'), policy('p', 'DENY'));
    await rename(join(dir, '.p.yaml.tmp-1234'), join(dir, 'p.yaml'));
    await applies('p', 'DENY', 'rename over');
    await editAndDeleteApply('p.yaml', 'p');
  });

  it("vim's backup: rename away, write anew, delete the backup", async () => {
    await fresh();
    await writeFile(join(dir, 'p.yaml'), policy('p'));
    await openStore();
    await rename(join(dir, 'p.yaml'), join(dir, 'p.yaml~'));
    await writeFile(join(dir, 'p.yaml'), policy('p', 'DENY'));
    await rm(join(dir, 'p.yaml~'));
    await applies('p', 'DENY', 'vim save');
    await editAndDeleteApply('p.yaml', 'p');
  });

  it('kubectl cp: a new file created, then written in pieces', async () => {
    await fresh();
    await openStore();
    const text = policy('p', 'DENY');
    const handle = await open(join(dir, 'p.yaml'), 'w');
    await handle.write(text.slice(0, 20));
    await handle.write(text.slice(20));
    await handle.close();
    await applies('p', 'DENY', 'copied file');
    await editAndDeleteApply('p.yaml', 'p');
  });

  it('git checkout: many files deleted and created at once, in a subdirectory too', async () => {
    await fresh();
    await mkdir(join(dir, 'team'));
    const names = Array.from({ length: 20 }, (_, i) => `p${i}`);
    for (const n of names) await writeFile(join(dir, n.endsWith('1') ? 'team' : '', `${n}.yaml`), policy(n));
    await openStore();
    for (const n of names) await rm(join(dir, n.endsWith('1') ? 'team' : '', `${n}.yaml`));
    await rm(join(dir, 'team'), { recursive: true });
    await mkdir(join(dir, 'team'));
    for (const n of names) await writeFile(join(dir, n.endsWith('1') ? 'team' : '', `${n}.yaml`), policy(n, 'DENY'));
    await eventually(() => assert.deepEqual(names.map(actionOf), names.map(() => 'DENY')));
    await editAndDeleteApply('p0.yaml', 'p0');
    await editAndDeleteApply(join('team', 'p1.yaml'), 'p1');
  });

  it('a ConfigMap mount: ..data swapped atomically to a new timestamped directory', async () => {
    await fresh();
    // As the orchestrator lays it out: name -> ..data/name, ..data -> ..<timestamp>/.
    const generation = async (stamp: string, files: Record<string, string>) => {
      await mkdir(join(dir, stamp));
      for (const [name, text] of Object.entries(files)) await writeFile(join(dir, stamp, name), text);
      await symlink(stamp, join(dir, '..data_tmp'));
      await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    };
    await generation('..2026_01_01_00_00_00.1', { 'a.yaml': policy('a'), 'b.yaml': policy('b') });
    await symlink(join('..data', 'a.yaml'), join(dir, 'a.yaml'));
    await symlink(join('..data', 'b.yaml'), join(dir, 'b.yaml'));
    await openStore();
    assert.equal(actionOf('a'), 'ALLOW');
    await generation('..2026_01_01_00_01_00.2', { 'a.yaml': policy('a', 'DENY'), 'b.yaml': policy('b') });
    await rm(join(dir, '..2026_01_01_00_00_00.1'), { recursive: true });
    await applies('a', 'DENY', 'first swap');
    // An edit of the ConfigMap is another swap; a key removed from it loses its symlink too.
    await generation('..2026_01_01_00_02_00.3', { 'a.yaml': policy('a', 'AUDIT'), 'b.yaml': policy('b') });
    await rm(join(dir, '..2026_01_01_00_01_00.2'), { recursive: true });
    await applies('a', 'AUDIT', 'edit by a second swap');
    await generation('..2026_01_01_00_03_00.4', { 'b.yaml': policy('b') });
    await rm(join(dir, '..2026_01_01_00_02_00.3'), { recursive: true });
    await applies('a', undefined, 'key removed by a third swap (dangling symlink)');
    await rm(join(dir, 'a.yaml'));
    await editAndDeleteApply('b.yaml', 'b');
  });

  it('the config directory itself deleted and created again keeps its last good config meanwhile', async () => {
    await fresh();
    const configDir = join(dir, 'config');
    await mkdir(configDir);
    await writeFile(join(configDir, 'p.yaml'), policy('p'));
    await openStore(configDir);
    await rm(configDir, { recursive: true });
    // A missing directory is not an empty one: the last good config stays.
    await writeFile(join(dir, 'marker'), '');
    assert.equal(actionOf('p'), 'ALLOW');
    await mkdir(configDir);
    await writeFile(join(configDir, 'p.yaml'), policy('p', 'DENY'));
    await applies('p', 'DENY', 'the re-created directory is read');
    dir = configDir;
    await editAndDeleteApply('p.yaml', 'p');
  });

  it('the periodic rescan sees what no watch reports: a file edited behind a symlink to an unwatched place', async () => {
    await fresh();
    // Hidden directories are neither read nor watched; the symlink in the root is, but editing its
    // target does not touch the link, so no watch fires.
    await mkdir(join(dir, '.elsewhere'));
    await writeFile(join(dir, '.elsewhere', 'p.yaml'), policy('p'));
    await symlink(join('.elsewhere', 'p.yaml'), join(dir, 'p.yaml'));
    store = new FileConfigStore({ configDir: dir, debounceMs: 20, rescanIntervalMs: RESCAN_MS });
    await store.start();
    // Rescans triggered by watches are done once the marker is read.
    await writeFile(join(dir, 'marker.yaml'), policy('marker'));
    await applies('marker', 'ALLOW', 'marker');
    await writeFile(join(dir, '.elsewhere', 'p.yaml'), policy('p', 'DENY'));
    await applies('p', 'DENY', 'the periodic rescan read the edit');
  });
});
