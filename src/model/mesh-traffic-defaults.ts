// The mesh config's traffic defaults, as the Go mesh applies them where a resource says nothing:
// `outboundTrafficPolicy.mode` (proxies whose Sidecar sets no policy), `connectTimeout` (every
// cluster a DestinationRule gives none) and `defaultHttpRetryPolicy` (HTTP routes without
// `retries`, and the default routes of services without a VirtualService), and the default
// `exportTo` of services, VirtualServices and DestinationRules that set none. Read purely from the
// parsed document.
import { checkRetryOn } from '../api/semantic.js';
import { checkDuration, checkExportTo } from '../api/syntax.js';
import type { OutboundTrafficMode } from './push-context.js';
import type { ExportDefaults } from './traffic.js';
import type { HttpRetry } from '../networking/http-route.js';
import { parseDuration } from '../common/duration.js';

export class TrafficDefaultsError extends Error {}

export interface MeshTrafficDefaults {
  /** `outboundTrafficPolicy.mode`; unset: ALLOW_ANY, the Go mesh's default mesh config. */
  readonly outboundTrafficPolicy?: OutboundTrafficMode;
  /** `connectTimeout` in seconds; unset: 10, the Go mesh's default mesh config. */
  readonly connectTimeout?: number;
  /** `defaultHttpRetryPolicy`, read as a VirtualService's `retries`; unset: the Go mesh's default policy. */
  readonly defaultHttpRetryPolicy?: HttpRetry;
  /** `defaultServiceExportTo`, `defaultVirtualServiceExportTo`, `defaultDestinationRuleExportTo`; unset: all namespaces. */
  readonly exportTo?: ExportDefaults;
}

const EXPORT_FIELDS = { services: 'defaultServiceExportTo', virtualServices: 'defaultVirtualServiceExportTo', destinationRules: 'defaultDestinationRuleExportTo' } as const;

export const TRAFFIC_DEFAULT_FIELDS = ['outboundTrafficPolicy', 'connectTimeout', 'defaultHttpRetryPolicy', ...Object.values(EXPORT_FIELDS)] as const;

const OUTBOUND_MODES: readonly OutboundTrafficMode[] = ['ALLOW_ANY', 'REGISTRY_ONLY'];

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function outboundMode(v: unknown): OutboundTrafficMode | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isRecord(v)) throw new TrafficDefaultsError('outboundTrafficPolicy: expected a mapping with "mode"');
  const unknown = Object.keys(v).filter((k) => k !== 'mode');
  if (unknown.length > 0) throw new TrafficDefaultsError(`outboundTrafficPolicy.${unknown[0]}: unknown field (expected mode)`);
  // An empty policy keeps the default mesh config's mode, as the Go mesh merges the file over it.
  const mode = v['mode'] ?? 'ALLOW_ANY';
  if (typeof mode !== 'string' || !(OUTBOUND_MODES as readonly string[]).includes(mode)) throw new TrafficDefaultsError(`outboundTrafficPolicy.mode: ${JSON.stringify(mode)} is not one of ${OUTBOUND_MODES.join(', ')}`);
  return mode as OutboundTrafficMode;
}

function durationText(v: unknown, field: string): string {
  const problem = typeof v === 'string' ? checkDuration(v) : `expected a duration such as 10s, got ${JSON.stringify(v)}`;
  if (problem) throw new TrafficDefaultsError(`${field}: ${problem}`);
  return v as string;
}

const RETRY_FIELDS = ['attempts', 'perTryTimeout', 'retryOn', 'retryRemoteLocalities', 'retryIgnorePreviousHosts', 'backoff'];

/** An HTTPRetry as a VirtualService's `retries` is checked: a whole number of attempts, durations, retryOn policies. */
function httpRetry(v: unknown): HttpRetry | undefined {
  if (v === undefined || v === null) return undefined;
  const at = 'defaultHttpRetryPolicy';
  if (!isRecord(v)) throw new TrafficDefaultsError(`${at}: expected a mapping of retry fields (${RETRY_FIELDS.join(', ')})`);
  const unknown = Object.keys(v).filter((k) => !RETRY_FIELDS.includes(k));
  if (unknown.length > 0) throw new TrafficDefaultsError(`${at}.${unknown[0]}: unknown field (expected ${RETRY_FIELDS.join(', ')})`);
  const { attempts, retryOn, retryRemoteLocalities, retryIgnorePreviousHosts } = v;
  if (attempts !== undefined && (typeof attempts !== 'number' || !Number.isInteger(attempts) || attempts < 0)) throw new TrafficDefaultsError(`${at}.attempts: ${JSON.stringify(attempts)} is not a non-negative integer`);
  if (retryOn !== undefined) {
    const problem = typeof retryOn === 'string' ? checkRetryOn(retryOn) : `expected a comma-separated string, got ${JSON.stringify(retryOn)}`;
    if (problem) throw new TrafficDefaultsError(`${at}.retryOn: ${problem}`);
  }
  for (const [k, b] of [['retryRemoteLocalities', retryRemoteLocalities], ['retryIgnorePreviousHosts', retryIgnorePreviousHosts]] as const) {
    if (b !== undefined && typeof b !== 'boolean') throw new TrafficDefaultsError(`${at}.${k}: expected true or false, got ${JSON.stringify(b)}`);
  }
  const perTryTimeout = v['perTryTimeout'] === undefined ? undefined : durationText(v['perTryTimeout'], `${at}.perTryTimeout`);
  const backoff = v['backoff'] === undefined ? undefined : durationText(v['backoff'], `${at}.backoff`);
  return {
    ...(attempts !== undefined ? { attempts: attempts as number } : {}),
    ...(perTryTimeout ? { perTryTimeout } : {}),
    ...(retryOn !== undefined ? { retryOn: retryOn as string } : {}),
    ...(retryRemoteLocalities !== undefined ? { retryRemoteLocalities: retryRemoteLocalities as boolean } : {}),
    ...(retryIgnorePreviousHosts !== undefined ? { retryIgnorePreviousHosts: retryIgnorePreviousHosts as boolean } : {}),
    ...(backoff ? { backoff } : {}),
  };
}

/** A default exportTo: a list of ".", "*" or namespace names. */
function exportList(v: unknown, field: string): readonly string[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.length === 0) throw new TrafficDefaultsError(`${field}: expected a non-empty list of ".", "*" or namespaces, got ${JSON.stringify(v)}`);
  v.forEach((e: unknown, i) => {
    const problem = typeof e === 'string' ? checkExportTo(e) : `expected ".", "*" or a namespace, got ${JSON.stringify(e)}`;
    if (problem) throw new TrafficDefaultsError(`${field}[${i}]: ${problem}`);
  });
  return v as string[];
}

function exportDefaults(doc: Readonly<Record<string, unknown>>): ExportDefaults | undefined {
  const entries = Object.entries(EXPORT_FIELDS).flatMap(([kind, field]) => {
    const list = exportList(doc[field], field);
    return list ? [[kind, list] as const] : [];
  });
  return entries.length > 0 ? Object.fromEntries(entries) : undefined;
}

/** The traffic defaults a mesh config document sets (fields it leaves out stay unset). */
export function readTrafficDefaults(doc: Readonly<Record<string, unknown>>): MeshTrafficDefaults {
  const mode = outboundMode(doc['outboundTrafficPolicy']);
  const timeout = doc['connectTimeout'] === undefined ? undefined : durationText(doc['connectTimeout'], 'connectTimeout');
  const retries = httpRetry(doc['defaultHttpRetryPolicy']);
  const exportTo = exportDefaults(doc);
  return {
    ...(exportTo ? { exportTo } : {}),
    ...(mode ? { outboundTrafficPolicy: mode } : {}),
    ...(timeout ? { connectTimeout: Number(parseDuration(timeout)) / 1e9 } : {}),
    ...(retries ? { defaultHttpRetryPolicy: retries } : {}),
  };
}
