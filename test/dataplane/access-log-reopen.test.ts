// A reopen (admin /reopen_logs, SIGUSR1) while lines wait for the flush timer: those lines go to
// the rotated file, and the lines after it reach the new file at the next flush, not after 64 KiB.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileSink, reopenAccessLogs } from '../../src/dataplane/access-log/loggers.js';

test('a reopen with a flush pending: the next lines are flushed to the new file on time', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'reopen-')), 'access.log');
  const sink = fileSink(path, 'path');
  sink.write('before\n');
  renameSync(path, `${path}.1`);
  reopenAccessLogs();
  sink.write('after\n');
  await new Promise((r) => setTimeout(r, 1_300));
  assert.equal(readFileSync(`${path}.1`, 'utf8'), 'before\n');
  assert.equal(readFileSync(path, 'utf8'), 'after\n');
});
