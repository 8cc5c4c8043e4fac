// Where access log lines go: a file opened for appending (one writer per path in the process,
// shared by every listener that logs there, as Envoy's access log manager shares them) or the
// process's stdout / stderr. Lines are buffered and written asynchronously, once a second or
// when 64 KiB are waiting (Envoy's file flush), never with a write per request; what is still
// buffered when the process exits is written synchronously then. Files are reopened on request
// (admin /reopen_logs, SIGUSR1), as Envoy does for log rotation: what was buffered goes to the old
// file, what follows to the file now at the path.
import { closeSync, openSync, write, writeSync } from 'node:fs';
import { scope } from '../../common/log.js';
import { ConfigError } from '../../envoy/config-error.js';

const log = scope('misc');

const FLUSH_INTERVAL_MS = 1_000;
const FLUSH_BYTES = 64 * 1024;

export interface LogSink {
  write(line: string): void;
}

/** A destination's two ways of writing: in the background (calling back once done) and at exit. */
interface Output {
  write(chunk: Buffer, done: (e: Error | null | undefined) => void): void;
  writeNow(chunk: Buffer): void;
  /** Opens the destination again (a file: whatever is at its path now); absent for stdout/stderr. */
  reopen?(): void;
}

class BufferedSink implements LogSink {
  private pending: string[] = [];
  private size = 0;
  private timer: NodeJS.Timeout | undefined = undefined;
  private writing = false;
  private failed = false;
  /** A reopen asked for while a write was in flight: done once it completes, before the next one. */
  private reopenWanted = false;

  constructor(
    private readonly name: string,
    private readonly out: Output,
  ) {}

  write(line: string): void {
    this.pending.push(line);
    this.size += line.length;
    if (this.size >= FLUSH_BYTES) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), FLUSH_INTERVAL_MS).unref();
  }

  private take(): Buffer | undefined {
    if (this.pending.length === 0) return undefined;
    const chunk = Buffer.from(this.pending.join(''), 'utf8');
    this.pending = [];
    this.size = 0;
    return chunk;
  }

  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.writing) return;
    const chunk = this.take();
    if (!chunk) return;
    this.writing = true;
    this.out.write(chunk, (e) => {
      this.writing = false;
      if (this.reopenWanted) this.reopenNow();
      if (e && !this.failed) {
        this.failed = true;
        log.error(`access log ${this.name}: ${e.message}; lines are lost until a write succeeds`);
      } else if (!e) this.failed = false;
      // What came in meanwhile waits for the next flush, unless it is already large.
      if (this.size >= FLUSH_BYTES) this.flush();
      else if (this.pending.length > 0) this.timer ??= setTimeout(() => this.flush(), FLUSH_INTERVAL_MS).unref();
    });
  }

  /** Reopens the destination once no write is in flight on it (the old descriptor is closed then). */
  reopen(): void {
    if (!this.out.reopen) return;
    this.reopenWanted = true;
    if (!this.writing) this.reopenNow();
  }

  private reopenNow(): void {
    this.reopenWanted = false;
    this.flushNow();
    try {
      this.out.reopen?.();
    } catch (e) {
      log.error(`access log ${this.name}: cannot reopen: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; lines still go to the file it had open`);
    }
  }

  flushNow(): void {
    // Cleared and forgotten: a cleared timer left here would keep write() from arming the next
    // one, and the lines after a reopen would wait for 64 KiB.
    clearTimeout(this.timer);
    this.timer = undefined;
    const chunk = this.take();
    if (!chunk) return;
    try {
      this.out.writeNow(chunk);
    } catch (e) {
      log.error(`access log ${this.name}: ${(e as Error).message}`);
    }
  }
}

/** A file's writes, appended, the rest of a partial write included; reopening swaps the descriptor (the sink calls it between writes). */
function fileOutput(path: string): Output {
  let fd = openSync(path, 'a');
  const writeAll = (chunk: Buffer, done: (e: Error | null) => void): void =>
    write(fd, chunk, 0, chunk.length, null, (e, n) => (e || n >= chunk.length ? done(e) : writeAll(chunk.subarray(n), done)));
  return {
    write: writeAll,
    writeNow: (chunk) => void writeSync(fd, chunk),
    reopen() {
      const next = openSync(path, 'a');
      closeSync(fd);
      fd = next;
    },
  };
}

function streamOutput(stream: NodeJS.WriteStream, fd: number): Output {
  return { write: (chunk, done) => void stream.write(chunk, done), writeNow: (chunk) => void writeSync(fd, chunk) };
}

const sinks = new Map<string, BufferedSink>();
let exitHook = false;

function sinkOf(key: string, open: () => Output): BufferedSink {
  let sink = sinks.get(key);
  if (!sink) {
    sink = new BufferedSink(key, open());
    sinks.set(key, sink);
    if (!exitHook) {
      exitHook = true;
      process.on('exit', () => {
        for (const s of sinks.values()) s.flushNow();
      });
    }
  }
  return sink;
}

export function stdoutSink(): LogSink {
  return sinkOf('/dev/stdout', () => streamOutput(process.stdout, 1));
}

export function stderrSink(): LogSink {
  return sinkOf('/dev/stderr', () => streamOutput(process.stderr, 2));
}

/** The sink of a file path, opened (append-only) at config time: a path that cannot be opened is a ConfigError at `field`, as Envoy refuses it. */
export function fileSink(path: string, field: string): LogSink {
  if (!path) throw new ConfigError(field, 'a path is required');
  if (path === '/dev/stdout') return stdoutSink();
  if (path === '/dev/stderr') return stderrSink();
  return sinkOf(path, () => {
    try {
      return fileOutput(path);
    } catch (e) {
      throw new ConfigError(field, `cannot open access log file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  });
}

/** Reopens every access log file of this process (admin /reopen_logs, SIGUSR1), e.g. after logrotate moved them. */
export function reopenAccessLogs(): void {
  for (const s of sinks.values()) s.reopen();
}

/** Writes everything buffered now (tests, and a proxy that stops without exiting). */
export function flushAccessLogs(): void {
  for (const s of sinks.values()) s.flushNow();
}
