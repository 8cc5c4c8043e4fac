// The discovery server's connected proxies as the introspection page shows them: per proxy and xDS
// type, the last push (version and time), whether it was acked, and the last NACK.
import type { ConnectionStatus } from '../../xds/connection.js';
import { compareText } from '../../common/compare.js';
import type { ProxyView } from './api.js';

export function proxyViews(connections: readonly ConnectionStatus[]): ProxyView[] {
  return connections
    .map((c) => ({
      proxyId: c.proxyId,
      connectionId: c.connectionId,
      peer: c.peer,
      protocol: c.protocol,
      connectedAt: c.connectedAt,
      types: c.watches.map((w) => ({
        type: w.type,
        state: w.state,
        ...(w.sent ? { sentVersion: w.sent.version, sentAt: w.sent.time } : {}),
        ...(w.acked ? { ackedVersion: w.acked.version } : {}),
        ...(w.lastNack ? { lastNack: w.lastNack.message } : {}),
      })),
    }))
    .sort((a, b) => compareText(a.proxyId, b.proxyId) || compareText(a.connectionId, b.connectionId));
}
