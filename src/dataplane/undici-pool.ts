// undici's connection pool without undici's index: the index also loads fetch, WebSocket,
// EventSource, the caches and their dependencies, about 3 MiB of heap and 9 MiB of RSS in every
// proxy process that only ever needs `Pool` (docs/bench.md, 2026-11-24 "mesh-proxy's memory").
// undici publishes no exports map, so its lib/ files are reachable by path; the class is the same
// one the index re-exports.
import { createRequire } from 'node:module';
import type { Pool as UndiciPool } from 'undici';

const require = createRequire(import.meta.url);

export type Pool = UndiciPool;
export const Pool = require('undici/lib/dispatcher/pool.js') as typeof UndiciPool;
