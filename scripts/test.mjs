#!/usr/bin/env node
// `npm test`: the whole suite, two test files at a time, with TMPDIR set to a directory of its own
// that is removed when the suite ends. Tests and the programs they start make temporary
// directories (certificates, configs, sockets); one whose process is killed at a timeout cannot
// clean up after itself, and repeated runs would otherwise fill /tmp. Like /tmp, it is writable by
// every user (sticky): the capture tests run the agent as the proxy's own user.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = mkdtempSync(join(tmpdir(), 'mesh-test-'));
chmodSync(root, 0o1777);
const run = spawnSync(process.execPath, ['--test', '--test-concurrency=2', 'dist/test/'], { stdio: 'inherit', env: { ...process.env, TMPDIR: root } });
rmSync(root, { recursive: true, force: true });
if (run.error) throw run.error;
process.exit(run.status ?? 1);
