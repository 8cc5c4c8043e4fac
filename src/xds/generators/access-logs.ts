// The access logs of one proxy, per side: the Telemetries that apply to it (model/telemetry.ts)
// over the mesh config's accessLogFile, as the Go mesh's AccessLogBuilder asks
// push.Telemetry.AccessLogging per listener class. Outbound listeners and gateways are the CLIENT
// side, inbound listeners the SERVER side.
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import type { MeshAccessLog } from '../../model/mesh-access-log.js';
import { telemetryFileLoggers, type LogSide } from '../../model/telemetry.js';
import type { TelemetryProviders } from '../../model/telemetry-providers.js';
import { meshAccessLogs, sideAccessLogs, type AccessLogs } from '../../networking/access-log.js';
import { identityKey, perObject } from '../../common/same-inputs.js';
import { cacheKey, memo } from '../cache.js';

/** The mesh config's access logging: accessLogFile's logger and the providers Telemetries name. */
export interface AccessLogging {
  readonly mesh?: MeshAccessLog;
  readonly providers: TelemetryProviders;
}

export interface ProxyAccessLogs {
  readonly client: AccessLogs | undefined;
  readonly server: AccessLogs | undefined;
}

const NONE: ProxyAccessLogs = { client: undefined, server: undefined };

/** accessLogFile's logs on both sides, one object per settings: no Telemetry, the same for every proxy. */
const meshOnly = perObject((logging: AccessLogging): ProxyAccessLogs => {
  const logs = logging.mesh ? meshAccessLogs(logging.mesh) : undefined;
  return { client: logs, server: logs };
});

/**
 * The proxy's access logs under `logging` (none given: no logs). Proxies the same Telemetries
 * apply to share one object per snapshot, so memo and cache keys can take it by accessLogsKey.
 */
export function proxyAccessLogs(proxy: Proxy, push: PushContext, logging: AccessLogging | undefined): ProxyAccessLogs {
  if (!logging) return NONE;
  const telemetries = push.telemetriesFor(proxy);
  if (telemetries.length === 0 && logging.providers.defaultAccessLogging.length === 0) return meshOnly(logging);
  const side = (s: LogSide): AccessLogs | undefined => sideAccessLogs(telemetryFileLoggers(telemetries, logging.providers, s), logging.mesh, logging.providers.listenerLog);
  return memo(push, `accessLogs:${identityKey(logging, telemetries)}`, () => ({ client: side('CLIENT'), server: side('SERVER') }));
}

const hashed = perObject((logs: AccessLogs) => cacheKey('accessLogs', logs));

/** A side's part of a memo or dependency key: its loggers' content, hashed once per object. */
export function accessLogsKey(logs: AccessLogs | undefined): string {
  return logs ? hashed(logs) : '';
}
