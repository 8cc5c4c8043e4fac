// Keeps an xDS response larger than what the proxies' gRPC clients accept off the wire. gRPC
// clients refuse a message over their receive limit (4 MiB unless configured otherwise, as for
// our agent and proxy, and proxyless gRPC) by ending the stream; the proxy reconnects, is sent the
// same response, and from then on receives nothing at all, later DENY policies included. Held back
// instead, the proxy keeps its last good config of that type, every other type keeps flowing, and
// the oversized response is logged, counted and listed (/debug/oversized) until a later push fits.

import type { VersionedResource } from './connection.js';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import type { ProxyInfo } from './generator.js';
import { shortTypeName } from '../envoy/types.js';

const log = scope('ads');

/** gRPC's default receive limit, which every client of ours keeps. */
export const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/** How many of the largest resources a report names. */
const LARGEST_LISTED = 5;

export interface SizedResource {
  readonly name: string;
  readonly bytes: number;
}

export interface OversizedResponse {
  readonly proxyId: string;
  readonly connectionId: string;
  /** Short type name: lds, cds, rds, eds, ... */
  readonly type: string;
  readonly version: string;
  readonly bytes: number;
  readonly limit: number;
  /** The largest resources of the response, largest first. */
  readonly largest: readonly SizedResource[];
  readonly since: string;
}

/** The stream a response is for. */
export type ResponseTarget = Pick<ProxyInfo, 'id' | 'connectionId'>;

export class ResponseSizeGuard {
  /** By connection id, then type: what is being held back now. */
  private readonly held = new Map<string, Map<string, OversizedResponse>>();

  constructor(readonly limit = MAX_RESPONSE_BYTES) {}

  /**
   * Whether a response of `bytes` may be sent. When not, it is recorded, logged once per version
   * and counted as a send error of its type (pilot_xds_pushes{type="<type>_senderr"}).
   */
  admit(target: ResponseTarget, typeUrl: string, version: string, bytes: number, resources: () => Iterable<SizedResource>): boolean {
    const type = shortTypeName(typeUrl);
    const byType = this.held.get(target.connectionId);
    if (bytes <= this.limit) {
      if (byType?.delete(type)) log.info(`${target.connectionId}: ${type} fits again (${bytes} bytes); sent`);
      if (byType?.size === 0) this.held.delete(target.connectionId);
      return true;
    }
    counter('pilot_xds_pushes').inc({ type: `${type}_senderr` });
    const previous = byType?.get(type);
    if (previous?.version === version) return false;
    const largest = [...resources()].sort((a, b) => b.bytes - a.bytes).slice(0, LARGEST_LISTED);
    const report: OversizedResponse = { proxyId: target.id, connectionId: target.connectionId, type, version, bytes, limit: this.limit, largest, since: previous?.since ?? new Date().toISOString() };
    this.held.set(target.connectionId, (byType ?? new Map<string, OversizedResponse>()).set(type, report));
    log.error(
      `${target.connectionId}: ${type} response of ${bytes} bytes exceeds the ${this.limit}-byte message limit; not sent, the proxy keeps its last ${type} config. Largest: ${largest.map((r) => `${r.name} (${r.bytes} bytes)`).join(', ')}`,
    );
    return false;
  }

  /** The stream ended: nothing is held for it any more. */
  forget(connectionId: string): void {
    this.held.delete(connectionId);
  }

  /** Every response held back now, for /debug/oversized. */
  list(): OversizedResponse[] {
    return [...this.held.values()].flatMap((byType) => [...byType.values()]);
  }
}

/** The resources of a response with their encoded sizes, for the report of an oversized one. */
export function sized(resources: Iterable<VersionedResource>): SizedResource[] {
  return [...resources].map((r) => ({ name: r.name, bytes: r.resource.value.length }));
}
