// The connections a cluster's HTTP/1.1 pool lends to node:http's agent (chunked and `Expect`
// requests) and to undici (the ext_authz HTTP check), which keep their requests to themselves. Their
// ends are counted from their sockets: local, or remote when the upstream's FIN or reset came first.
// node:http's requests are rare, so each is followed with listeners: it is pending
// (upstream_rq_pending_*) until its connection is ready, then active (upstream_rq_active) until node
// closes it, and a connection that closes meanwhile ends with an active request, as Envoy counts it.
// undici's are not followed (which socket carries which request is undici's alone): neither in the
// request gauges nor in the _with_active_rq counters.
import type { ClientRequest } from 'node:http';
import type { Socket } from 'node:net';
import type { OpenedUpstream } from './upstream-pools.js';
import type { RequestGauges } from './upstream-rq-stats.js';
import { onPeerEnd, type CloseSide, type ConnectionEnds } from './upstream-cx-stats.js';

/** A lent connection: whether it is ready, and the node:http request it carries now. */
interface Lent {
  ready: boolean;
  carrying: number;
  /** Requests waiting for it to be ready. */
  readonly waiting: (() => void)[];
}

export class LentConnections {
  private readonly sockets = new WeakMap<Socket, Lent>();

  constructor(
    private readonly count: ConnectionEnds,
    private readonly requests: RequestGauges,
  ) {}

  /** A connection about to be lent: its end is counted as its socket closes. */
  lend(opened: OpenedUpstream): void {
    const lent: Lent = { ready: false, carrying: 0, waiting: [] };
    this.sockets.set(opened.socket, lent);
    opened.socket.once(opened.ready, () => {
      lent.ready = true;
      for (const attach of lent.waiting.splice(0)) attach();
    });
    let side: CloseSide = 'local';
    onPeerEnd(opened.socket, () => (side = 'remote'));
    opened.socket.once('close', () => this.count.destroyed(side, lent.carrying > 0));
  }

  /** Follows a node:http request on the lent connection node gives it. */
  follow(req: ClientRequest): void {
    req.once('socket', (socket: Socket) => {
      const lent = this.sockets.get(socket);
      if (!lent) return;
      let state: 'pending' | 'active' | 'done' = 'pending';
      const attach = (): void => {
        state = 'active';
        lent.carrying++;
      };
      if (lent.ready) {
        this.requests.active++;
        attach();
      } else {
        this.requests.wait();
        lent.waiting.push(() => {
          if (state !== 'pending') return;
          this.requests.attach();
          attach();
        });
      }
      req.once('close', () => {
        if (state === 'active') {
          this.requests.active--;
          lent.carrying--;
        } else if (state === 'pending') this.requests.pending--;
        state = 'done';
      });
    });
  }
}
