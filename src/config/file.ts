// The file config store (--configDir): every *.yaml, *.yml and *.json file under a directory,
// watched (see dir-watch.ts). Any change event triggers a (debounced) rescan that compares file
// contents with what was last read, so creates, edits, deletes, renames, editors' atomic saves,
// `git checkout` and ConfigMap symlink swaps all reduce to the same "this file now holds this text"
// step. Changes found in one rescan are committed together, which makes a rename (delete + create
// of identical content) produce no events at all.

import { readdir, readFile, stat } from 'node:fs/promises';
import { extname, join, relative, sep } from 'node:path';
import { keyOf, type AnyResource, type ResourceKey } from '../api/types.js';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import { DirectoryWatch } from './dir-watch.js';
import { readResources } from './documents.js';
import { MemoryBackedStore, MemoryStore } from './memory.js';
import { keyString, type ConfigSource } from './store.js';

const log = scope('source');

const EXTENSIONS = new Set(['.yaml', '.yml', '.json']);
const DEFAULT_DEBOUNCE_MS = 50;

export interface FileStoreOptions {
  /** The --configDir directory. */
  configDir: string;
  /** Quiet time after a change event before rescanning, so a burst of writes is read once. */
  debounceMs?: number;
  /** Rescan this often even when no watch reported a change (DEFAULT_RESCAN_INTERVAL_MS). */
  rescanIntervalMs?: number;
}

interface Listing {
  files: string[];
  /** Sub-directories (relative paths) whose files are read, each watched. */
  directories: string[];
}

interface FileState {
  text: string;
  /** The resources this file contributes: its valid documents, plus its last good ones while it has errors. */
  resources: Map<string, AnyResource>;
  /** Current rejection messages of this file. */
  problems: string[];
}

export class FileConfigStore extends MemoryBackedStore implements ConfigSource {
  private readonly files = new Map<string, FileState>();
  private readonly unreadable = new Map<string, string>();
  private readonly configDir: string;
  private readonly debounceMs: number;
  private readonly watch: DirectoryWatch;
  private debounce: NodeJS.Timeout | undefined;
  /** Whether the directory was missing at the last rescan, so that it is logged once. */
  private missing = false;
  /** Rescans run one at a time; this is the tail of the chain. */
  private scanning: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(options: FileStoreOptions) {
    super(new MemoryStore());
    this.configDir = options.configDir;
    this.debounceMs = options.debounceMs ?? DEFAULT_DEBOUNCE_MS;
    this.watch = new DirectoryWatch({ root: this.configDir, onChange: () => this.scheduleScan(), ...(options.rescanIntervalMs !== undefined ? { rescanIntervalMs: options.rescanIntervalMs } : {}) });
  }

  /** Current rejections by file (relative to the config directory), for debug endpoints. */
  problems(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const [file, state] of this.files) if (state.problems.length > 0) out[file] = state.problems;
    for (const [file, message] of this.unreadable) out[file] = [message];
    return out;
  }

  async start(): Promise<void> {
    const info = await stat(this.configDir).catch(() => undefined);
    if (!info?.isDirectory()) {
      this.watch.close();
      throw new Error(`--configDir ${this.configDir}: no such directory`);
    }
    await this.enqueueScan();
    this.store.markSynced();
    log.info(`config directory ${this.configDir}: ${this.store.all().length} resources from ${this.files.size} files`);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.debounce);
    // After the scan under way, which may still arm watches.
    await this.scanning;
    this.watch.close();
  }

  private scheduleScan(): void {
    if (this.closed) return;
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => void this.enqueueScan(), this.debounceMs);
  }

  private enqueueScan(): Promise<void> {
    this.scanning = this.scanning.then(() => this.scan()).catch((err: unknown) => {
      // Never let a scan failure escape: the server keeps its last good config.
      log.error(`reading ${this.configDir} failed: ${err instanceof Error ? err.message : String(err)}`);
    });
    return this.scanning;
  }

  private async scan(): Promise<void> {
    if (this.closed) return;
    const listing = await this.listDirectory();
    // Watches are (re-)armed after each listing; a new directory's watch starts after its files
    // were listed, so one more rescan reads what was written there in between.
    if (await this.watch.arm(listing?.directories ?? [])) this.scheduleScan();
    if (listing === undefined) return;
    const changes = new Map<string, FileState | undefined>();
    for (const file of this.files.keys()) if (!listing.files.includes(file)) changes.set(file, undefined);
    for (const file of listing.files) {
      const text = await this.read(file);
      const previous = this.files.get(file);
      // Gone between listing and reading, or a dangling symlink: the file holds nothing.
      if (text === undefined) {
        if (previous) changes.set(file, undefined);
      } else if (previous?.text !== text) changes.set(file, this.load(file, text, previous));
    }
    if (changes.size > 0) this.commit(changes);
  }

  /**
   * The files and directories to read, or undefined while the directory is missing: its last good
   * config stays in force (a volume being re-mounted, a directory being replaced) until it is back.
   */
  private async listDirectory(): Promise<Listing | undefined> {
    let entries;
    try {
      entries = await readdir(this.configDir, { recursive: true, withFileTypes: true });
    } catch (err) {
      if (!this.missing) log.warn(`config directory ${this.configDir} cannot be listed (${(err as Error).message}); keeping the last good config until it is back`);
      this.missing = true;
      return undefined;
    }
    if (this.missing) log.info(`config directory ${this.configDir} is back`);
    this.missing = false;
    const relativePath = (e: (typeof entries)[number]) => relative(this.configDir, join(e.parentPath, e.name));
    // Hidden files and directories are editor temp files or mount internals (`..data`).
    const visible = (path: string) => !path.split(sep).some((part) => part.startsWith('.'));
    const files = entries
      .filter((e) => (e.isFile() || e.isSymbolicLink()) && EXTENSIONS.has(extname(e.name)))
      .map(relativePath)
      .filter(visible)
      .sort();
    const directories = entries.filter((e) => e.isDirectory()).map(relativePath).filter(visible);
    return { files, directories };
  }

  /** The text of a file, or undefined if it is gone; other read errors keep its last good state. */
  private async read(file: string): Promise<string | undefined> {
    try {
      const text = await readFile(join(this.configDir, file), 'utf8');
      this.unreadable.delete(file);
      return text;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EISDIR') return undefined;
      const message = `${join(this.configDir, file)}: cannot read: ${(err as Error).message}`;
      if (this.unreadable.get(file) !== message) log.error(message);
      this.unreadable.set(file, message);
      return this.files.get(file)?.text;
    }
  }

  private load(file: string, text: string, previous: FileState | undefined): FileState {
    const { resources, rejections } = readResources(join(this.configDir, file), text);
    const fresh = new Map(resources.map((r) => [keyString(keyOf(r)), r]));
    // A file saved broken keeps its last good resources until it is fixed.
    if (rejections.length > 0 && previous) {
      for (const [key, resource] of previous.resources) if (!fresh.has(key)) fresh.set(key, resource);
    }
    for (const rejection of rejections) {
      for (const message of rejection.messages) log.warn(message);
      counter('pilot_total_rejected_configs').inc({ kind: rejection.kind });
    }
    return { text, resources: fresh, problems: rejections.flatMap((r) => r.messages) };
  }

  /** Applies file changes, then recomputes each affected key; the first file in path order wins a key. */
  private commit(changes: Map<string, FileState | undefined>): void {
    const affected = new Map<string, ResourceKey>();
    const note = (state: FileState | undefined) => {
      for (const [key, resource] of state?.resources ?? []) affected.set(key, keyOf(resource));
    };
    for (const [file, state] of changes) {
      note(this.files.get(file));
      note(state);
      if (state === undefined) this.files.delete(file);
      else this.files.set(file, state);
    }
    const order = [...this.files.keys()].sort();
    for (const key of [...affected.keys()].sort()) {
      const owners = order.filter((file) => this.files.get(file)!.resources.has(key));
      const [winner, ...shadowed] = owners;
      if (winner === undefined) {
        this.store.delete(affected.get(key)!);
        continue;
      }
      for (const file of shadowed) {
        log.warn(`${join(this.configDir, file)}: ${key} is also defined in ${join(this.configDir, winner)}; that definition is used`);
        counter('pilot_total_rejected_configs').inc({ kind: affected.get(key)!.kind });
      }
      this.store.apply(this.files.get(winner)!.resources.get(key)!);
    }
  }
}
