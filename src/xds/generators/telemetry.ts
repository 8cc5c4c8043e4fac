// The standard metrics' filters of one proxy per listener class: the Telemetries that apply to it
// (model/telemetry.ts) merged with the mesh config's metrics providers (model/telemetry-metrics.ts)
// into the filters the listener builders place (networking/telemetry-filters.ts), as the Go
// mesh's Telemetries.HTTPFilters/TCPFilters per listener class.
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import { recordedMetrics } from '../../model/telemetry-metrics.js';
import type { TelemetryProviders } from '../../model/telemetry-providers.js';
import { listenerTelemetry, type ListenerClass, type ListenerTelemetry } from '../../networking/telemetry-filters.js';
import { identityKey, perObject } from '../../common/same-inputs.js';
import { cacheKey, memo } from '../cache.js';

/**
 * The proxy's filters of class `cls` under `providers` (none given: none). Proxies the same
 * Telemetries apply to share one object per snapshot, so memo and cache keys can take it by
 * telemetryKey; without any Telemetry, one object per providers and class.
 */
export function proxyTelemetry(proxy: Proxy, push: PushContext, providers: TelemetryProviders | undefined, cls: ListenerClass): ListenerTelemetry | undefined {
  if (!providers) return undefined;
  const telemetries = push.telemetriesFor(proxy);
  if (telemetries.length === 0) return memo(providers, `telemetry:${cls}`, () => listenerTelemetry(cls, recordedMetrics([], providers)));
  return memo(push, `telemetry:${cls}:${identityKey(providers, telemetries)}`, () => listenerTelemetry(cls, recordedMetrics(telemetries, providers)));
}

const hashed = perObject((t: ListenerTelemetry) => cacheKey('telemetry', t));

/** A class's part of a memo or dependency key: its filters' content, hashed once per object. */
export function telemetryKey(t: ListenerTelemetry | undefined): string {
  return t ? hashed(t) : '';
}
