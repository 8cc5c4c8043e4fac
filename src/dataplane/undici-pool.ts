// undici's connection pool without undici's index: the index also loads fetch, WebSocket,
// EventSource, the caches and their dependencies, about 3 MiB of heap and 9 MiB of RSS in every
// proxy process, which needs `Pool` and its `request()` (the ext_authz HTTP check) only
// (docs/bench.md, 2026-11-24 "mesh-proxy's memory"). undici publishes no exports map, so its lib/
// files are reachable by path; the class is the one the index re-exports, and the request API is
// put on the dispatcher prototype as the index does (test/dataplane/ext-authz.test.ts uses it).
import { createRequire } from 'node:module';
import type { Dispatcher as UndiciDispatcher, Pool as UndiciPool } from 'undici';

const require = createRequire(import.meta.url);

export type Pool = UndiciPool;
export const Pool = require('undici/lib/dispatcher/pool.js') as typeof UndiciPool;

const Dispatcher = require('undici/lib/dispatcher/dispatcher.js') as typeof UndiciDispatcher;
Object.assign(Dispatcher.prototype, require('undici/lib/api/index.js') as object);
