// Tells the file config store when to rescan its directory. Every directory of the tree gets its
// own non-recursive watch (inotify on a directory reports creates, writes, deletes and renames of
// its entries by name, whatever inode the name points at), re-armed after every rescan from the
// directories the scan listed. Node's recursive watch on Linux follows the files it saw instead,
// so a file deleted and created again under the same name (`rm a.yaml && cp b.yaml a.yaml`) went
// unseen. A periodic rescan is the safety net for what no watch reports (a network file system,
// an exhausted inotify budget). A directory deleted and created again (the root included) is
// noticed by its identity (device, inode, birth time) changing, and watched anew.

import { watch, type FSWatcher } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { scope } from '../common/log.js';

const log = scope('source');

/** Between two rescans when no watch reported anything. */
export const DEFAULT_RESCAN_INTERVAL_MS = 10_000;
/** After a watch failed or the directory went missing: how soon to try again. */
export const REWATCH_DELAY_MS = 1_000;

export interface DirectoryWatchOptions {
  readonly root: string;
  /** Called for any change (and by the periodic rescan); the store debounces and rescans. */
  readonly onChange: () => void;
  readonly rescanIntervalMs?: number;
}

interface Watched {
  readonly watcher: FSWatcher;
  /** Device, inode and birth time of the directory when the watch was opened. */
  readonly identity: string;
}

export class DirectoryWatch {
  private readonly watchers = new Map<string, Watched>();
  private readonly periodic: NodeJS.Timeout;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly opts: DirectoryWatchOptions) {
    this.periodic = setInterval(() => opts.onChange(), opts.rescanIntervalMs ?? DEFAULT_RESCAN_INTERVAL_MS);
    this.periodic.unref();
  }

  /**
   * Brings the watches in line with the directories a rescan found (relative paths, '' being the
   * root). Returns whether a watch was added: what changed in a new directory before its watch
   * existed is only seen by another rescan, which the caller should schedule.
   */
  async arm(directories: readonly string[]): Promise<boolean> {
    if (this.closed) return false;
    if ((await this.identityOf('')) === undefined) {
      this.disarm('the directory is missing');
      this.retryLater();
      return false;
    }
    const wanted = new Set(['', ...directories]);
    let added = false;
    for (const dir of new Set([...this.watchers.keys(), ...wanted])) {
      const identity = wanted.has(dir) ? await this.identityOf(dir) : undefined;
      const current = this.watchers.get(dir);
      // Gone, or replaced by a new directory of the same name: the watch is on the old one.
      if (current !== undefined && current.identity !== identity) {
        current.watcher.close();
        this.watchers.delete(dir);
      }
      // Closed while this ran: a watch opened now would keep the process alive.
      if (this.closed) return false;
      if (identity === undefined || this.watchers.has(dir)) continue;
      const watcher = this.open(dir);
      if (watcher === undefined) continue;
      this.watchers.set(dir, { watcher, identity });
      added = true;
    }
    return added;
  }

  close(): void {
    this.closed = true;
    clearInterval(this.periodic);
    clearTimeout(this.retry);
    this.disarm();
  }

  private path(dir: string): string {
    return dir === '' ? this.opts.root : join(this.opts.root, dir);
  }

  private open(dir: string): FSWatcher | undefined {
    const path = this.path(dir);
    try {
      const watcher = watch(path, () => this.opts.onChange());
      watcher.on('error', (err) => this.lost(dir, watcher, err));
      return watcher;
    } catch (err) {
      // Gone between the listing and now (ENOENT), or out of watches (ENOSPC): a rescan retries.
      log.warn(`cannot watch ${path}: ${(err as Error).message}; retrying`);
      this.retryLater();
      return undefined;
    }
  }

  /** A watch that failed (its directory deleted, for one) is dropped; the rescan re-arms what exists. */
  private lost(dir: string, watcher: FSWatcher, err: Error): void {
    watcher.close();
    if (this.watchers.get(dir)?.watcher === watcher) this.watchers.delete(dir);
    if (this.closed) return;
    log.debug(`watch of ${this.path(dir)} ended: ${err.message}`);
    this.opts.onChange();
  }

  private disarm(reason?: string): void {
    if (reason !== undefined && this.watchers.size > 0) log.warn(`config directory ${this.opts.root}: ${reason}; watching it again when it is back`);
    for (const { watcher } of this.watchers.values()) watcher.close();
    this.watchers.clear();
  }

  private retryLater(): void {
    if (this.closed || this.retry !== undefined) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.opts.onChange();
    }, REWATCH_DELAY_MS);
    this.retry.unref();
  }

  private async identityOf(dir: string): Promise<string | undefined> {
    const info = await stat(this.path(dir)).catch(() => undefined);
    // With the birth time: a directory deleted and made again at once often gets the same inode.
    return info?.isDirectory() ? `${info.dev}:${info.ino}:${info.birthtimeMs}` : undefined;
  }
}
