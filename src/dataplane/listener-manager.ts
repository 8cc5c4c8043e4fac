// Listeners from LDS: the socket lifecycle. Each listener is compiled (listener/compiler.ts) into
// filter chains chosen per connection (filter-chain-match.ts); its connections are inspected
// (listener/sniffers.ts), handed over by original destination (listener/original-dst-handoff.ts)
// and served by the chain's network filter (listener/http-hosting.ts, listener/tcp-proxy.ts).
//
// An update is two-phase like the other xDS types: `prepare` compiles every listener and binds the
// addresses that are new; `commit` swaps the compiled listeners in. As in Envoy, a listener that
// does not compile or bind (a ConfigError naming the field or address) fails alone: the plan keeps
// its previous version, the others apply, and the update is NACKed naming it.
// A listener whose message is unchanged keeps its compiled chains and connections. A changed one
// keeps its socket when the address is the same: new connections get the new chains, connections
// of the old chains drain (responses say `connection: close`, idle ones close, the rest are closed
// after the drain time). A removed listener stops accepting at once and its connections drain.
// Listeners with `bind_to_port: false` are never bound.
import { createServer, type Server, type Socket } from 'node:net';
import { equals } from '@bufbuild/protobuf';
import { scope } from '../common/log.js';
import { ListenerSchema, type Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { ConfigError, withinResource } from '../envoy/config-error.js';
import { normalizeIp } from '../envoy/matchers.js';
import { connectionDestination, setTransparent } from './original-dst.js';
import { markOriginalSrc } from './original-src.js';
import { statName, type StatSample } from './stats.js';
import type { Chain } from './listener/chain.js';
import { compileListener, listenerStatName, type ActiveListener, type ListenerCompileDeps } from './listener/compiler.js';
import { OriginalDstHandoff } from './listener/original-dst-handoff.js';
import { inspectConnection } from './listener/sniffers.js';
import { logUnmatchedConnection } from './access-log/connection.js';

const log = scope('conn_handler');

export interface ListenerDeps extends ListenerCompileDeps {
  /** How long the connections of a removed or changed listener may take to finish (--drain-time-s). */
  readonly drainTimeMs: number;
  /**
   * A worker process binds nothing: the server of an address is one its connections are emitted
   * on, as the main process hands them over (workers.ts).
   */
  readonly handedSocket?: (key: string) => Server;
  /**
   * The main process with workers: offers each new connection (not read from yet) to a worker;
   * true when a worker took it.
   */
  readonly distribute?: (key: string, socket: Socket) => boolean;
}

/** A bound address and the listener it currently serves. */
interface BoundSocket {
  readonly key: string;
  readonly server: Server;
  listener: ActiveListener;
  /**
   * Connections that came before the plan binding this socket was committed (it may wait for
   * its routes: warming); undefined once committed.
   */
  held?: Socket[];
}

export interface ListenerPlan {
  readonly listeners: ReadonlyMap<string, ActiveListener>;
  readonly sockets: ReadonlyMap<string, BoundSocket>;
  /** Sockets bound by `prepare` (closed again by `abort`). */
  readonly fresh: readonly BoundSocket[];
  /** The listeners of the update that could not be compiled or bound, with why. */
  readonly failures: ReadonlyMap<string, Error>;
}

export interface ListenerInfo {
  readonly name: string;
  /** The configured address. */
  readonly address: string;
  /** The bound address (the real port when 0 was configured); undefined when not bound. */
  readonly bound?: { host: string; port: number };
  readonly message: Listener;
  readonly draining: boolean;
}

export class ListenerManager {
  private listeners = new Map<string, ActiveListener>();
  /** Where redirected connections are handed over (original-dst-handoff.ts). */
  private handoff = new OriginalDstHandoff([]);
  private sockets = new Map<string, BoundSocket>();
  /** Chains replaced or removed whose connections are still finishing. */
  private readonly retiring = new Set<Chain>();
  /** Sockets of a graceful drain: still accepting until the drain time ends (or shutdown). */
  private readonly gracefulSockets = new Set<Server>();
  /** Set by /drain_listeners: listeners in that scope are not bound again. */
  private stopped: 'none' | 'inbound' | 'all' = 'none';

  constructor(private readonly deps: ListenerDeps) {
    deps.stats.addSource(() => this.samples());
  }

  /**
   * Compiles the next listener set and binds new addresses, listener by listener as Envoy's LDS
   * does: a listener that does not compile or bind is left out of the plan (the version it
   * replaces, if any, stays in it) and its error is in `failures`; the others go ahead.
   */
  async prepare(msgs: readonly Listener[]): Promise<ListenerPlan> {
    const listeners = new Map<string, ActiveListener>();
    const failures = new Map<string, Error>();
    /** A listener that failed: its previous version serves on, if it had one. */
    const fail = (name: string, e: unknown): void => {
      failures.set(name, e instanceof Error ? e : new Error(String(e)));
      const old = this.listeners.get(name);
      if (old) listeners.set(name, old);
      else listeners.delete(name);
    };
    for (const msg of msgs) {
      const old = this.listeners.get(msg.name);
      if (old && equals(ListenerSchema, old.message, msg)) listeners.set(msg.name, old);
      else {
        try {
          listeners.set(msg.name, compileListener(msg, this.deps));
        } catch (e) {
          fail(msg.name, withinResource(`listener ${msg.name}`, e));
        }
      }
    }
    const sockets = new Map<string, BoundSocket>();
    const fresh: BoundSocket[] = [];
    // Listeners kept as they were come first: a new listener cannot take their address.
    const ordered = [...listeners.values()].sort((a, b) => Number(this.listeners.get(b.name) === b) - Number(this.listeners.get(a.name) === a));
    for (const l of ordered) {
      if (!l.bind || this.isStopped(l)) continue;
      try {
        const bs = await this.socketFor(l, sockets);
        if (this.sockets.get(bs.key) !== bs) fresh.push(bs);
        sockets.set(bs.key, bs);
      } catch (e) {
        fail(l.name, e);
        const old = listeners.get(l.name);
        // Its previous version keeps its socket (it was bound before this update).
        if (old && old.bind && !this.isStopped(old)) {
          const bs = this.sockets.get(addressKey(old));
          if (bs && !sockets.has(bs.key)) sockets.set(bs.key, bs);
          else listeners.delete(l.name);
        }
      }
    }
    return { listeners, sockets, fresh, failures };
  }

  /** The socket `l` serves on: the one bound to its address already, or a new one. */
  private async socketFor(l: ActiveListener, planned: ReadonlyMap<string, BoundSocket>): Promise<BoundSocket> {
    const key = addressKey(l);
    const taken = planned.get(key);
    if (taken) throw new ConfigError(`listener ${l.name}.address`, `${key} is also the address of listener ${taken.listener.name}`);
    return this.sockets.get(key) ?? (await this.bindSocket(key, l));
  }

  /** Undoes a prepared plan that will not be committed. */
  abort(plan: ListenerPlan): void {
    for (const bs of plan.fresh) {
      bs.server.close();
      for (const s of bs.held ?? []) s.destroy();
    }
  }

  commit(plan: ListenerPlan): void {
    for (const bs of plan.fresh) {
      const held = bs.held ?? [];
      delete bs.held;
      // After the swap below, so that they meet the committed listener.
      if (held.length > 0) setImmediate(() => held.forEach((s) => this.acceptNew(bs, s)));
    }
    const before = this.listeners;
    const oldSockets = this.sockets;
    // The bound sockets hand new connections to their new listeners.
    for (const [key, bs] of plan.sockets) {
      // bs may be an old socket (reused), whose listener becomes the new one of that address.
      const next = [...plan.listeners.values()].find((l) => l.bind && addressKey(l) === key);
      if (next) bs.listener = next;
    }
    for (const [key, bs] of oldSockets) {
      if (plan.sockets.get(key) === bs) continue;
      bs.server.close();
      log.info(`listener ${bs.listener.name} stopped accepting on ${key}`);
    }
    this.listeners = new Map(plan.listeners);
    this.handoff = new OriginalDstHandoff(this.listeners.values());
    this.sockets = new Map(plan.sockets);
    for (const [name, old] of before) {
      if (this.listeners.get(name) === old) continue;
      for (const chain of old.allChains()) this.retire(chain);
    }
  }

  /** /drain_listeners: stop accepting (now, or after the drain time when graceful) and drain. */
  drainListeners(opts: { inboundOnly: boolean; graceful: boolean }): void {
    this.stopped = opts.inboundOnly ? (this.stopped === 'all' ? 'all' : 'inbound') : 'all';
    for (const [key, bs] of this.sockets) {
      if (!this.isStopped(bs.listener)) continue;
      for (const chain of bs.listener.allChains()) void chain.drain(this.deps.drainTimeMs);
      if (opts.graceful) {
        this.gracefulSockets.add(bs.server);
        setTimeout(() => this.closeGraceful(bs.server), this.deps.drainTimeMs).unref();
      } else bs.server.close();
      this.sockets.delete(key);
    }
  }

  /** Stops accepting everywhere and waits (at most the drain time) for connections to finish. */
  async shutdown(drainTimeMs = this.deps.drainTimeMs): Promise<void> {
    for (const bs of this.sockets.values()) bs.server.close();
    this.sockets.clear();
    for (const server of this.gracefulSockets) this.closeGraceful(server);
    const chains = [...this.listeners.values()].flatMap((l) => l.allChains()).concat([...this.retiring]);
    this.stopped = 'all';
    await Promise.all(chains.map((c) => c.drain(drainTimeMs, true)));
    for (const c of chains) c.dispose();
  }

  /** Closes every connection now. */
  destroy(): void {
    for (const bs of this.sockets.values()) bs.server.close();
    for (const server of this.gracefulSockets) this.closeGraceful(server);
    for (const l of this.listeners.values()) for (const c of l.allChains()) c.destroyAll();
    for (const c of this.retiring) c.destroyAll();
  }

  info(): ListenerInfo[] {
    const bound = new Map([...this.sockets.values()].map((bs) => [bs.listener, bs.server.address()] as const));
    return [...this.listeners.values()].map((l) => {
      const a = bound.get(l);
      return {
        name: l.name,
        address: `${l.address.host}:${l.address.port}`,
        ...(a && typeof a === 'object' ? { bound: { host: a.address, port: a.port } } : {}),
        message: l.message,
        draining: l.allChains().some((c) => c.draining),
      };
    });
  }

  messages(): Listener[] {
    return [...this.listeners.values()].map((l) => l.message);
  }

  private closeGraceful(server: Server): void {
    if (this.gracefulSockets.delete(server)) server.close();
  }

  private isStopped(l: ActiveListener): boolean {
    return this.stopped === 'all' || (this.stopped === 'inbound' && l.inbound);
  }

  private retire(chain: Chain): void {
    if (this.retiring.has(chain)) return;
    this.retiring.add(chain);
    void chain.drain(this.deps.drainTimeMs).then(() => {
      chain.dispose();
      this.retiring.delete(chain);
      this.deps.stats.retire(chain.samples());
    });
  }

  private *samples(): Iterable<StatSample> {
    for (const l of this.listeners.values()) {
      const tag = { name: 'envoy_listener_address', value: listenerStatName(l.address) };
      yield { ...statName('listener', 'downstream_cx_active', tag), kind: 'gauge', value: l.allChains().reduce((n, c) => n + c.connections.size, 0) };
      for (const c of l.allChains()) yield* c.samples();
    }
    for (const c of this.retiring) yield* c.samples();
    yield { ...statName('listener_manager', 'total_listeners_active'), kind: 'gauge', value: this.listeners.size };
  }

  private async bindSocket(key: string, l: ActiveListener): Promise<BoundSocket> {
    const distribute = this.deps.distribute;
    const server = this.deps.handedSocket ? this.deps.handedSocket(key) : await listenOn(l, distribute !== undefined);
    const bs: BoundSocket = { key, server, listener: l, held: [] };
    server.on('connection', (socket: Socket) => {
      if (distribute?.(key, socket)) return;
      if (bs.held) bs.held.push(socket);
      else this.acceptNew(bs, socket);
    });
    server.on('error', (e) => log.error(`listener ${l.name}: ${e.message}`));
    if (!this.deps.handedSocket) log.info(`listener ${l.name} listening on ${l.address.host}:${(server.address() as { port: number }).port}`);
    return bs;
  }

  /** A connection this process serves, on the listener its socket serves now. */
  private acceptNew(bs: BoundSocket, socket: Socket): void {
    // Paused on connect so that a worker would have got every byte: this process reads it.
    if (this.deps.distribute) socket.resume();
    this.accept(bs.listener, socket);
  }

  private accept(first: ActiveListener, socket: Socket): void {
    const l = first.message.useOriginalDst ? this.handoff.listenerFor(first, socket) : first;
    // The accepting listener's filters ran before any hand-off, as in Envoy.
    const mark = l.originalSrcMark ?? first.originalSrcMark;
    if (mark !== undefined) markOriginalSrc(socket, mark);
    l.counters.cx.inc();
    l.counters.workerCx.inc();
    socket.on('error', (e) => log.debug(`listener ${l.name}: downstream connection error: ${e.message}`));
    if (!l.inspection.http && !l.inspection.tls) {
      this.dispatch(l, socket, 'raw_buffer', []);
      return;
    }
    inspectConnection(socket, l.inspection).then(
      (found) => {
        if (found) this.dispatch(l, socket, found.transport, found.protocols, found.serverName ?? '');
        else socket.destroy();
      },
      () => socket.destroy(),
    );
  }

  private dispatch(l: ActiveListener, socket: Socket, transportProtocol: string, applicationProtocols: string[], serverName = ''): void {
    const destination = connectionDestination(socket);
    const chain = l.select({
      destinationIp: destination.address,
      destinationPort: destination.port,
      sourceIp: normalizeIp(socket.remoteAddress ?? ''),
      sourcePort: socket.remotePort ?? 0,
      serverName,
      transportProtocol,
      applicationProtocols,
    });
    if (!chain) {
      l.counters.noChain.inc();
      if (l.accessLogs) logUnmatchedConnection(l.accessLogs, socket, { address: normalizeIp(socket.remoteAddress ?? ''), port: socket.remotePort ?? 0 }, destination);
      log.debug(`listener ${l.name}: no filter chain matches a connection from ${socket.remoteAddress}:${socket.remotePort}`);
      socket.destroy();
      return;
    }
    chain.serve(socket);
  }
}

/** A bound server for the listener's address; a bind failure is a ConfigError naming it. */
async function listenOn(l: ActiveListener, pauseOnConnect: boolean): Promise<Server> {
  // TCP_NODELAY as Envoy sets it: a response head and body written apart must not wait on Nagle
  // (and the client's delayed ACK). node:http would set it on connections it accepted itself.
  const server = createServer({ allowHalfOpen: true, pauseOnConnect, noDelay: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(new ConfigError(`listener ${l.name}.address`, `cannot bind ${l.address.host}:${l.address.port}: ${e.code ?? e.message}`)));
    server.listen(l.address.port, l.address.host, () => resolve());
  });
  const notTransparent = l.message.transparent ? setTransparent(server) : undefined;
  if (notTransparent) {
    server.close();
    throw new ConfigError(`listener ${l.name}.transparent`, `cannot set IP_TRANSPARENT on ${l.address.host}:${l.address.port}: ${notTransparent}`);
  }
  return server;
}

/** The identity of a bound address; every port-0 listener gets a port of its own. */
function addressKey(l: ActiveListener): string {
  const at = `${l.address.host}:${l.address.port}`;
  return l.address.port === 0 ? `${at}/${l.name}` : at;
}
