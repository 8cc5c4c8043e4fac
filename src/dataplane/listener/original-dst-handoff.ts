// The original-destination hand-off: a `use_original_dst` listener (virtualOutbound, virtualInbound
// under iptables capture) reads each connection's original destination (original-dst.ts) and hands
// the connection to the listener of that address: the one bound on exactly that IP and port, else
// a wildcard one on that port, usually a `bind_to_port: false` listener that exists only to be
// handed connections. With no such listener the connection stays, matched on its original
// destination.
import type { Socket } from 'node:net';
import { scope } from '../../common/log.js';
import { normalizeIp } from '../../envoy/matchers.js';
import type { Address } from '../../envoy/request.js';
import { restoreOriginalDst } from '../original-dst.js';
import type { ActiveListener } from './compiler.js';

const log = scope('conn_handler');

/** The committed listeners by port, built once per commit so a hand-off is a lookup, not a scan. */
export class OriginalDstHandoff {
  private readonly byPort = new Map<number, ActiveListener[]>();

  constructor(listeners: Iterable<ActiveListener>) {
    for (const l of listeners) {
      const same = this.byPort.get(l.address.port);
      if (same) same.push(l);
      else this.byPort.set(l.address.port, [l]);
    }
  }

  /** The listener of the connection's original destination, or `l` itself. */
  listenerFor(l: ActiveListener, socket: Socket): ActiveListener {
    const dst = restoreOriginalDst(socket, l.address.port);
    const target = dst && this.listenerAt(dst);
    if (!target || target === l) return l;
    log.debug(`listener ${l.name}: connection to ${dst.address}:${dst.port} handed to listener ${target.name}`);
    return target;
  }

  /** The listener on exactly this address, else one on a wildcard address with its port. */
  listenerAt(dst: Address): ActiveListener | undefined {
    let wildcard: ActiveListener | undefined;
    for (const l of this.byPort.get(dst.port) ?? []) {
      const host = normalizeIp(l.address.host);
      if (host === dst.address) return l;
      if (!wildcard && (host === '0.0.0.0' || host === '::')) wildcard = l;
    }
    return wildcard;
  }
}
