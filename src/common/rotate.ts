// A size-rotated log file with the Go mesh's --log_rotate semantics: when the next write would pass
// max size, the file is renamed to `<name>-<UTC time>.<ext>` and a new one is opened; backups past
// max age (days) or beyond max count are removed. 0 means no limit for age and count.
import { closeSync, openSync, readdirSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { compareText } from './compare.js';

export interface RotateOptions {
  path: string;
  maxSizeMB: number;
  maxAgeDays: number;
  maxBackups: number;
}

const MB = 1024 * 1024;
const DAY_MS = 24 * 3600 * 1000;

export class RotatingFile {
  private fd: number;
  private size: number;
  private readonly maxBytes: number;

  constructor(private readonly opts: RotateOptions) {
    this.fd = openSync(opts.path, 'a');
    this.size = statSync(opts.path).size;
    this.maxBytes = opts.maxSizeMB > 0 ? opts.maxSizeMB * MB : Number.POSITIVE_INFINITY;
  }

  write(line: string): void {
    const bytes = Buffer.byteLength(line);
    if (this.size > 0 && this.size + bytes > this.maxBytes) this.rotate();
    writeSync(this.fd, line);
    this.size += bytes;
  }

  close(): void {
    closeSync(this.fd);
  }

  private rotate(): void {
    closeSync(this.fd);
    const stamp = new Date().toISOString().replace(/:/g, '-').replace('Z', '');
    renameSync(this.opts.path, this.backupName(stamp));
    this.fd = openSync(this.opts.path, 'a');
    this.size = 0;
    this.prune();
  }

  private backupName(stamp: string): string {
    const ext = extname(this.opts.path);
    const stem = basename(this.opts.path, ext);
    let name = join(dirname(this.opts.path), `${stem}-${stamp}${ext}`);
    // Two rotations within one millisecond must not overwrite each other.
    for (let i = 1; exists(name); i++) name = join(dirname(this.opts.path), `${stem}-${stamp}.${i}${ext}`);
    return name;
  }

  /** Backups of this file, newest first. */
  backups(): string[] {
    const ext = extname(this.opts.path);
    const stem = basename(this.opts.path, ext);
    const dir = dirname(this.opts.path);
    return readdirSync(dir)
      .filter((f) => f.startsWith(`${stem}-`) && f.endsWith(ext) && f !== basename(this.opts.path))
      .map((f) => join(dir, f))
      .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs || compareText(b, a));
  }

  private prune(): void {
    const now = Date.now();
    this.backups().forEach((file, i) => {
      const tooMany = this.opts.maxBackups > 0 && i >= this.opts.maxBackups;
      const tooOld = this.opts.maxAgeDays > 0 && now - statSync(file).mtimeMs > this.opts.maxAgeDays * DAY_MS;
      if (tooMany || tooOld) unlinkSync(file);
    });
  }
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}
