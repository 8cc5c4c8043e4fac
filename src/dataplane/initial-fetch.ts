// Envoy's initial_fetch_timeout, read where Envoy reads it: each subscription's ConfigSource. LDS
// and CDS from the bootstrap's dynamic_resources, RDS from the HttpConnectionManager that names the
// route configuration. Unset is Envoy's default of 15 s; 0 is "wait for the first response forever".
// Pure: config in, milliseconds out.
import type { ConfigSource } from '../gen/envoy/config/core/v3/config_source_pb.js';
import type { Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { rdsConfigSources } from '../envoy/ads-client.js';

/** Envoy's default when a ConfigSource leaves initial_fetch_timeout unset. */
export const DEFAULT_INITIAL_FETCH_TIMEOUT_MS = 15_000;

/** The wait for a subscription's first response; 0 = without limit. */
export function initialFetchTimeoutMs(source: ConfigSource | undefined): number {
  const d = source?.initialFetchTimeout;
  if (!d) return DEFAULT_INITIAL_FETCH_TIMEOUT_MS;
  return Number(d.seconds) * 1000 + Math.floor(d.nanos / 1_000_000);
}

/**
 * How long listeners wait for the route configurations `missing` (names they carry through RDS):
 * the longest of their HCMs' timeouts, 0 (no limit) when any of them waits forever.
 */
export function routeWarmingTimeoutMs(listeners: Iterable<Listener>, missing: readonly string[]): number {
  const sources = rdsConfigSources(listeners);
  let longest = 0;
  for (const name of missing) {
    for (const source of sources.get(name) ?? [undefined]) {
      const ms = initialFetchTimeoutMs(source);
      if (ms === 0) return 0;
      longest = Math.max(longest, ms);
    }
  }
  return longest;
}
