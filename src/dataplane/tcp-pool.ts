// A cluster's raw connections for the TCP proxy, one per downstream connection, counted as
// Envoy's TCP connection pool counts them: upstream_cx_total, upstream_cx_active,
// upstream_cx_connect_fail and _connect_timeout, the bytes, and as it closes upstream_cx_destroy
// with its _local / _remote parts. The downstream connection is the pool's request: pending while
// the connection connects, then active until it closes; a connection that closes after it
// connected always ends with that request active (the proxy holds it to the end), so in the
// _with_active_rq counters too.
//
// Who closed it follows Envoy's half-closing connection: the event that completes the close
// decides. The upstream's reset (or a refused connect) is remote; its FIN is remote when the
// proxy's own FIN was already sent (the downstream finished first), and otherwise the proxy's FIN
// that later completes the close is local, as is every close the proxy makes (a downstream reset,
// a connect timeout).
import type { Socket } from 'node:net';
import { ClusterPool, openUpstream, optionsFor, type Endpoint, type OpenedUpstream, type UpstreamOptions } from './upstream-pools.js';
import { peerError, type CloseSide } from './upstream-cx-stats.js';

export class TcpPool extends ClusterPool {
  /** A new connection to `ep` made with `o` (original_src, a PROXY header's downstream connection), half-closing, counted until it closes. */
  connect(ep: Endpoint, o: UpstreamOptions = {}): OpenedUpstream {
    const transport = this.transportOf(ep);
    const opened = openUpstream(ep, transport, this.settings(), this.count, { allowHalfOpen: true }, optionsFor(transport, o));
    const socket: Socket = opened.socket;
    let connected = false;
    let side: CloseSide = 'local';
    this.requests.wait();
    socket.once(opened.ready, () => {
      connected = true;
      this.requests.attach();
    });
    // writableFinished: the proxy's FIN has gone out.
    socket.once('end', () => socket.writableFinished && (side = 'remote'));
    socket.on('error', (e: NodeJS.ErrnoException) => peerError(e) && (side = 'remote'));
    socket.once('close', () => {
      if (connected) this.requests.active--;
      else this.requests.pending--;
      this.count.destroyed(side, connected);
    });
    return opened;
  }
}
