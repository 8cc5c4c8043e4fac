// Builds native/ (the SO_ORIGINAL_DST addon) with node-gyp against this Node's own headers when it
// ships them, so that no header download is needed (the build machines have no internet).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const prefix = dirname(dirname(process.execPath));
const args = ['rebuild', '-C', 'native', '--loglevel=warn'];
if (existsSync(join(prefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${prefix}`);
const nodeGyp = createRequire(import.meta.url).resolve('node-gyp/bin/node-gyp.js');
const r = spawnSync(process.execPath, [nodeGyp, ...args], { stdio: 'inherit' });
if (r.status !== 0) {
  console.error('native/: node-gyp failed; it needs python3, make and a C compiler (Debian: python3 make g++)');
  process.exit(r.status ?? 1);
}
