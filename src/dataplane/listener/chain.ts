// A compiled filter chain: the connections it serves and how they drain. The network filter at
// the end of the chain (http-hosting.ts, tcp-proxy.ts) decides what a connection is served with.
import type { Socket } from 'node:net';
import type { CompiledChainMatch } from '../filter-chain-match.js';
import type { StatCounter, StatSample } from '../stats.js';
import type { DownstreamTls } from '../tls/downstream.js';
import type { ConnectionGate } from './network-filters.js';

/** A listener's counters, shared by its chains. */
export interface ListenerCounters {
  /** The listener's stat name (`<ip>_<port>`), for the counters of its chains' transport sockets. */
  readonly address: string;
  readonly cx: StatCounter;
  /** Envoy's `listener.<address>.worker_<N>.downstream_cx_total`: the connections this process took. */
  readonly workerCx: StatCounter;
  readonly noChain: StatCounter;
  readonly rq: StatCounter;
  readonly rqClass: readonly StatCounter[];
}

/** One compiled filter chain with the connections it serves. */
export abstract class Chain {
  readonly connections = new Set<Socket>();
  draining = false;
  /** The chain's transport socket (TLS); absent: plaintext (raw_buffer). */
  transport?: DownstreamTls;
  /** The filters before the terminal one (network rbac), in chain order. */
  gates: readonly ConnectionGate[] = [];
  protected closingIdle = false;
  private closeTimer?: NodeJS.Timeout;

  constructor(
    readonly name: string,
    readonly match: CompiledChainMatch,
  ) {}

  serve(socket: Socket): void {
    if (socket.destroyed) return;
    this.connections.add(socket);
    socket.once('close', () => this.connections.delete(socket));
    if (this.transport) this.transport.handshake(socket, (s) => this.admit(s));
    else this.admit(socket);
  }

  /**
   * The gates decide once the connection is established (after the TLS handshake, so the peer
   * certificate is known) and before the terminal filter opens an upstream: a denied connection
   * is closed with nothing forwarded either way. The first gate that denies ends the chain.
   */
  private admit(socket: Socket): void {
    for (const g of this.gates) {
      const refused = g.admit(socket);
      if (refused === undefined) continue;
      this.refused(socket, refused);
      socket.destroy();
      return;
    }
    this.accept(socket);
  }

  protected abstract accept(socket: Socket): void;

  /** A gate refused the connection (`details`: why, in Envoy's words): the terminal filter's access logs record it. */
  protected refused(_socket: Socket, _details: string): void {}

  /** Counters owned by the compiled chain (filter stats), for /stats. */
  samples(): StatSample[] {
    return this.gates.flatMap((g) => g.samples());
  }

  /**
   * Asks connections to finish; after `drainTimeMs` the rest are closed. Resolves when all are
   * gone. `closeIdle` (shutdown) also closes idle connections at once; otherwise (listener update
   * or removal, drain_listeners) they get `connection: close` on their next response or close
   * after the connection manager's idle timeout (or the drain time), as closing a connection a
   * client may be reusing right now would fail its request.
   */
  drain(drainTimeMs: number, closeIdle = false): Promise<void> {
    this.draining = true;
    if (closeIdle) this.closingIdle = true;
    this.onDrain();
    if (!this.closeTimer) {
      this.closeTimer = setTimeout(() => this.destroyAll(), drainTimeMs);
      this.closeTimer.unref();
    }
    return this.whenEmpty();
  }

  protected onDrain(): void {}

  /** Releases what the chain holds once it serves nothing any more. */
  dispose(): void {}

  destroyAll(): void {
    clearTimeout(this.closeTimer);
    for (const s of this.connections) s.destroy();
  }

  async whenEmpty(): Promise<void> {
    while (this.connections.size > 0) {
      await new Promise<void>((resolve) => [...this.connections][0]!.once('close', () => resolve()));
    }
    clearTimeout(this.closeTimer);
  }
}
