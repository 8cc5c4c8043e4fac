// Records what was built into dist/build-info.json, read by `version` and the mesh_build metric.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';

const git = (...args) => {
  try {
    return execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return '';
  }
};
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const info = {
  version: pkg.version,
  revision: git('rev-parse', 'HEAD') || 'unknown',
  buildDate: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
  status: git('status', '--porcelain', '--untracked-files=no') === '' ? 'Clean' : 'Modified',
  tag: git('describe', '--tags', '--exact-match') || pkg.version,
};
mkdirSync(new URL('../dist/', import.meta.url), { recursive: true });
writeFileSync(new URL('../dist/build-info.json', import.meta.url), JSON.stringify(info, null, 2) + '\n');
