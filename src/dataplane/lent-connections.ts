// The connections a cluster's HTTP/1.1 pool lends to node:http's agent (chunked and `Expect`
// requests) and to undici (the ext_authz HTTP check), which keep their requests to themselves. Their
// ends are counted from their sockets: local, or remote when the upstream's FIN or reset came first.
// node:http's requests are rare, so each is followed with listeners: it is pending
// (upstream_rq_pending_*) until its connection is ready, then active (upstream_rq_active) until node
// closes it, and a connection that closes meanwhile ends with an active request, as Envoy counts it.
// A lent connection that reaches max_connection_duration closes as soon as it carries no request.
// undici tells which socket carries which request only on its diagnostics channels: its requests
// are followed there, active from the head's write to their end.
import { subscribe } from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';
import type { Socket } from 'node:net';
import type { OpenedUpstream } from './upstream-pools.js';
import type { RequestGauges } from './upstream-rq-stats.js';
import type { StatCounter } from './stats.js';
import { durationTimer, type PoolCloses } from './connection-limits.js';
import { onPeerEnd, type CloseSide, type ConnectionEnds } from './upstream-cx-stats.js';

/** A lent connection: whether it is ready, and the request it carries now. */
interface Lent {
  ready: boolean;
  carrying: number;
  /** Requests waiting for it to be ready. */
  readonly waiting: (() => void)[];
  /** Its cluster's request gauges. */
  readonly requests: RequestGauges;
  /** It reached max_connection_duration: closed once it carries nothing. */
  outlived: boolean;
  readonly socket: Socket;
}

/** A request on the connection ended. */
function carried(lent: Lent): void {
  if (--lent.carrying === 0 && lent.outlived) lent.socket.destroy();
}

/** Every lent connection of the process (undici's events name only the socket). */
const lentSockets = new WeakMap<Socket, Lent>();
/** undici's requests in flight on a lent connection. */
const undiciRequests = new WeakMap<object, Lent>();
let followingUndici = false;

/**
 * Follows undici's requests on lent connections, once per process, from the first undici pool on:
 * undici publishes on its channels only while they have subscribers. A request is active from the
 * write of its head (undici writes only on a connected socket: none is seen pending) until it
 * completed or failed; undici fails it only after the socket's close was counted.
 */
export function followUndici(): void {
  if (followingUndici) return;
  followingUndici = true;
  subscribe('undici:client:sendHeaders', (m) => {
    const { request, socket } = m as { request: object; socket: Socket };
    const lent = lentSockets.get(socket);
    if (!lent) return;
    undiciRequests.set(request, lent);
    lent.carrying++;
    lent.requests.start();
  });
  const ended = (m: unknown): void => {
    const { request } = m as { request: object };
    const lent = undiciRequests.get(request);
    if (!lent) return;
    undiciRequests.delete(request);
    lent.requests.active--;
    carried(lent);
  };
  subscribe('undici:request:trailers', ended);
  subscribe('undici:request:error', ended);
}

export class LentConnections {
  constructor(
    private readonly count: ConnectionEnds & Pick<PoolCloses, 'maxDuration'>,
    private readonly requests: RequestGauges,
  ) {}

  /** A connection about to be lent: its end is counted as its socket closes; it lives at most `maxDurationMs` (0: no limit). */
  lend(opened: OpenedUpstream, maxDurationMs: number): void {
    const lent: Lent = { ready: false, carrying: 0, waiting: [], requests: this.requests, outlived: false, socket: opened.socket };
    const aged = durationTimer(maxDurationMs, () => {
      this.count.maxDuration();
      lent.outlived = true;
      if (lent.carrying === 0) opened.socket.destroy();
    });
    opened.socket.once('close', () => clearTimeout(aged));
    lentSockets.set(opened.socket, lent);
    opened.socket.once(opened.ready, () => {
      lent.ready = true;
      for (const attach of lent.waiting.splice(0)) attach();
    });
    let side: CloseSide = 'local';
    onPeerEnd(opened.socket, () => (side = 'remote'));
    opened.socket.once('close', () => this.count.destroyed(side, lent.carrying > 0));
  }

  /** Follows a node:http request on the lent connection node gives it; `routeTotal`: its route's upstream_rq_total. */
  follow(req: ClientRequest, routeTotal?: StatCounter): void {
    req.once('socket', (socket: Socket) => {
      const lent = lentSockets.get(socket);
      if (!lent) return;
      let state: 'pending' | 'active' | 'done' = 'pending';
      const attach = (): void => {
        state = 'active';
        lent.carrying++;
      };
      if (lent.ready) {
        this.requests.start(routeTotal);
        attach();
      } else {
        this.requests.wait();
        lent.waiting.push(() => {
          if (state !== 'pending') return;
          this.requests.attach(routeTotal);
          attach();
        });
      }
      req.once('close', () => {
        if (state === 'active') {
          this.requests.active--;
          carried(lent);
        } else if (state === 'pending') this.requests.pending--;
        state = 'done';
      });
    });
  }
}
