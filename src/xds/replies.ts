// What a proxy's reply to a response means for the server's accounting: expired nonces and NACKs
// counted and logged, and the pilot_xds_<type>_reject gauges (proxies whose latest reply is a NACK).
import { counter, gauge } from '../common/metrics.js';
import { scope } from '../common/log.js';
import { shortTypeName, TypeUrl } from '../envoy/types.js';
import type { Connection, ReplyKind } from './connection.js';

const log = scope('ads');

const REJECT_GAUGES = {
  [TypeUrl.Listener]: 'pilot_xds_lds_reject',
  [TypeUrl.RouteConfiguration]: 'pilot_xds_rds_reject',
  [TypeUrl.Cluster]: 'pilot_xds_cds_reject',
  [TypeUrl.ClusterLoadAssignment]: 'pilot_xds_eds_reject',
} as const;

/** Accounting of an ACK, a NACK or a reply with an expired nonce. */
export function recordReply(conn: Connection, typeUrl: string, kind: ReplyKind, nonce: string): void {
  const type = shortTypeName(typeUrl);
  if (kind === 'stale') {
    counter('pilot_xds_expired_nonce').inc({ type });
    log.debug(`${conn.proxy.connectionId}: ${type} reply with expired nonce ${nonce} ignored`);
  } else if (kind === 'nack') {
    const nack = conn.watches.get(typeUrl)?.lastNack;
    counter('pilot_total_xds_rejects').inc({ type });
    log.warn(`${conn.proxy.connectionId} rejected ${type} version ${nack?.rejectedVersion} (nonce ${nonce}), keeps ${nack?.keptVersion || 'nothing'}: ${nack?.message}`);
  }
}

/** pilot_xds_<type>_reject: of the live connections, those whose latest reply for the type is a NACK. */
export function updateRejectGauge(typeUrl: string, conns: readonly Connection[]): void {
  if (!(typeUrl in REJECT_GAUGES)) return;
  const name = REJECT_GAUGES[typeUrl as keyof typeof REJECT_GAUGES];
  gauge(name).set(conns.filter((c) => c.watches.get(typeUrl)?.rejecting).length);
}
