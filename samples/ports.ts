// The port allocator of tests and benchmarks (and the local mesh's `freePorts`).
import { closeSync, mkdirSync, openSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Ports that tests and benchmarks hand to processes they start: below Linux's ephemeral range
 * (32768-60999), so that no outgoing connection takes one between the choice and the child's
 * bind, and claimed with a lock file, so that test files running side by side never choose the
 * same. Claims end with the process; older than an hour, they count as left over by a killed run.
 */
const PORT_RANGE = { first: 20000, last: 32767 };
const PORT_CLAIMS = join(tmpdir(), `mesh-test-ports-${process.getuid?.() ?? 0}`);
const CLAIM_TTL_MS = 3600_000;
const claimed: string[] = [];

function claimPort(port: number): boolean {
  const path = join(PORT_CLAIMS, String(port));
  try {
    if (Date.now() - statSync(path).mtimeMs > CLAIM_TTL_MS) rmSync(path, { force: true });
  } catch {
    // not claimed
  }
  try {
    closeSync(openSync(path, 'wx'));
  } catch {
    return false;
  }
  if (claimed.length === 0) process.once('exit', () => claimed.forEach((c) => rmSync(c, { force: true })));
  claimed.push(path);
  return true;
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/** A free loopback port of this process's own, for a program a test or benchmark starts. */
export async function freePort(): Promise<number> {
  mkdirSync(PORT_CLAIMS, { recursive: true });
  for (let attempt = 0; attempt < 1000; attempt++) {
    const port = PORT_RANGE.first + Math.floor(Math.random() * (PORT_RANGE.last - PORT_RANGE.first + 1));
    if (claimPort(port) && (await bindable(port))) return port;
  }
  throw new Error(`no free port in ${PORT_RANGE.first}-${PORT_RANGE.last}`);
}
