// Credentials in local mode (--configDir without an orchestrator): the tree
// `<configDir>/credentials/<namespace>/<name>/` holds what a Secret's data would (`tls.crt`,
// `tls.key`, `ca.crt`, or `cert`/`key`/`cacert`), one file per key. Rescanned on every change the
// directory watch reports; a file that cannot be read keeps that credential's last good content.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { scope } from '../../common/log.js';
import { DirectoryWatch } from '../../config/dir-watch.js';
import { credentialOf, type CredentialStore } from './store.js';

const log = scope('secretcontroller');

/** The credentials tree's place inside the config directory. */
export const CREDENTIALS_DIR = 'credentials';

async function subdirectories(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isDirectory()).map((e) => e.name);
}

export class DirectoryCredentials {
  private readonly root: string;
  private readonly watch: DirectoryWatch;
  private scanning: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: CredentialStore,
    configDir: string,
    rescanIntervalMs?: number,
  ) {
    this.root = join(configDir, CREDENTIALS_DIR);
    this.watch = new DirectoryWatch({ root: this.root, onChange: () => void this.rescan(), ...(rescanIntervalMs !== undefined ? { rescanIntervalMs } : {}) });
  }

  async start(): Promise<void> {
    await this.rescan();
    log.info(`credentials from ${this.root}: ${this.store.keys().length}`);
  }

  /** Scans serialized: a change reported during a scan gets a scan of its own after it. */
  rescan(): Promise<void> {
    this.scanning = this.scanning.then(() => this.scan());
    return this.scanning;
  }

  private async scan(): Promise<void> {
    const seen = new Set<string>();
    const dirs: string[] = [];
    for (const namespace of await subdirectories(this.root)) {
      dirs.push(namespace);
      for (const name of await subdirectories(join(this.root, namespace))) {
        dirs.push(join(namespace, name));
        const data = await this.read(join(this.root, namespace, name));
        if (!data) {
          seen.add(`${namespace}/${name}`);
          continue;
        }
        const credential = credentialOf(data);
        if (credential) seen.add(`${namespace}/${name}`);
        this.store.set(namespace, name, credential);
      }
    }
    for (const key of this.store.keys()) {
      if (seen.has(key)) continue;
      const [namespace = '', name = ''] = key.split('/');
      this.store.set(namespace, name, undefined);
    }
    if (await this.watch.arm(dirs)) await this.scan();
  }

  /** A directory's files by name; undefined (keep the last good content) when one cannot be read. */
  private async read(dir: string): Promise<Map<string, Buffer> | undefined> {
    const data = new Map<string, Buffer>();
    try {
      for (const e of await readdir(dir, { withFileTypes: true })) if (e.isFile()) data.set(e.name, await readFile(join(dir, e.name)));
      return data;
    } catch (err) {
      log.warn(`${dir}: cannot read (${(err as Error).message}); keeping its last good content`);
      return undefined;
    }
  }

  close(): void {
    this.watch.close();
  }
}
