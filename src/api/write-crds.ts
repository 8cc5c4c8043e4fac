// Writes deploy/crds.yaml from the schema source; test/api/crds.test.ts fails when it is stale.
// Run from the sources (`npx tsx src/api/write-crds.ts`) or the build: the repository root is found
// by walking up to package.json either way.

import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { renderCrds } from './crds.js';

let root = dirname(fileURLToPath(import.meta.url));
while (!existsSync(join(root, 'package.json'))) root = dirname(root);
const target = join(root, 'deploy', 'crds.yaml');
writeFileSync(target, renderCrds());
process.stdout.write(`wrote ${target}\n`);
