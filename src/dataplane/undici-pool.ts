// undici's connection pool, loaded on first use and without undici's index. Only the ext_authz
// HTTP check uses it; loading its modules costs a proxy about 2 MiB of heap and several MiB of RSS
// (its HTTP/1.1 client and parser), so a proxy without that filter never loads them. The index
// would also load fetch, WebSocket, EventSource and the caches, about 3 MiB of heap and 9 MiB of RSS
// more (docs/bench.md, 2026-11-24 "mesh-proxy's memory"). undici publishes no exports map, so its
// lib/ files are reachable by path; the class is the one the index re-exports, and the request API
// is put on the dispatcher prototype as the index does (test/dataplane/ext-authz.test.ts uses it).
// Its connections are the cluster's (upstream-pools.ts opens them), counted from their sockets, and
// its requests followed on its diagnostics channels (lent-connections.ts).
import type { Dispatcher as UndiciDispatcher, Pool as UndiciPool } from 'undici';
import { onFirstUse } from '../common/lazy-require.js';

export type Pool = UndiciPool;

/** undici's `Pool` class, its modules loaded by the first call. */
export const undiciPool = onFirstUse((req) => {
  const Dispatcher = req('undici/lib/dispatcher/dispatcher.js') as typeof UndiciDispatcher;
  Object.assign(Dispatcher.prototype, req('undici/lib/api/index.js') as object);
  return req('undici/lib/dispatcher/pool.js') as typeof UndiciPool;
});
