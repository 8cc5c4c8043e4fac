// Envoy's route-level stats, kept for a route with a stat_prefix: `vhost.<virtual host
// name>.route.<stat_prefix>.<stat>`, the counters Envoy's router makes with the route (its
// RouteStats: upstream_rq_total, _retry, _retry_limit_exceeded, _retry_overflow, _retry_success,
// _timeout, 0 until counted) and those its code stats charge as responses come (upstream_rq_completed,
// upstream_rq_<N>xx, upstream_rq_<code>, the upstream_rq_time histogram). Made once per route as its
// configuration is compiled; counting allocates nothing. A route without a stat_prefix has none.
import type { StatHistogram } from './histograms.js';
import { promName, type StatCounter, type StatName, type StatsStore } from './stats.js';

/** Where route stats live: the proxy's store (same names, same counters across route updates). */
export type RouteStatsStore = Pick<StatsStore, 'counter' | 'histogram'>;

/**
 * Envoy's default tokenized tag extractors that match vhost stats (well_known_names.cc), in its
 * order: `$` is the tag's token, `*` any one token, a final `**` any further tokens. Tokens are the
 * name's dot-separated parts, so a virtual host name with dots (the Go mesh's `host:port` ones)
 * gives its first part as `envoy_virtual_host`, the rest stays in the name, and the route pattern
 * (the third token is `route`) does not match: Envoy's own result for such names.
 */
const TOKEN_TAGS: readonly (readonly [tag: string, pattern: readonly string[]])[] = [
  ['envoy_virtual_host', ['vhost', '$', '**']],
  ['envoy_route', ['vhost', '*', 'route', '$', '**']],
];

/** The index of the pattern's `$` token in `tokens`, or -1 when the pattern does not match. */
function tokenMatch(pattern: readonly string[], tokens: readonly string[]): number {
  let found = -1;
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]!;
    if (p === '**') return found;
    if (i >= tokens.length) return -1;
    if (p === '$') found = i;
    else if (p !== '*' && p !== tokens[i]) return -1;
  }
  return tokens.length === pattern.length ? found : -1;
}

/**
 * A route stat's names: `/stats`'s, and the Prometheus one with Envoy's default tags extracted: the
 * virtual host and route (TOKEN_TAGS), `envoy_response_code` (`upstream_rq_200` -> `upstream_rq`)
 * and `envoy_response_code_class` (`upstream_rq_2xx` -> `upstream_rq_xx`).
 */
export function routeStatName(vhost: string, prefix: string, stat: string): StatName {
  const name = `vhost.${vhost}.route.${prefix}.${stat}`;
  const tokens = name.split('.');
  const labels: Record<string, string> = {};
  const removed = new Set<number>();
  for (const [tag, pattern] of TOKEN_TAGS) {
    const i = tokenMatch(pattern, tokens);
    if (i >= 0) {
      labels[tag] = tokens[i]!;
      removed.add(i);
    }
  }
  // The stat is the last token; no token tag takes it (each `$` has tokens after it).
  let leaf = tokens.pop()!;
  const code = /_rq_(\d{3})$/.exec(leaf);
  const codeClass = /_rq_(\d)xx$/.exec(leaf);
  if (code) {
    labels['envoy_response_code'] = code[1]!;
    leaf = leaf.slice(0, -4);
  } else if (codeClass) {
    labels['envoy_response_code_class'] = codeClass[1]!;
    leaf = `${leaf.slice(0, -3)}xx`;
  }
  const extracted = [...tokens.filter((_, i) => !removed.has(i)), leaf].join('.');
  return { name, prom: promName(extracted), labels };
}

/** The counters one response status charges. */
interface StatusCounters {
  readonly completed: StatCounter;
  readonly group: StatCounter | undefined;
  readonly code: StatCounter;
}

export class RouteStats {
  /** An attempt reached a ready upstream connection (counted where the cluster's upstream_rq_total is). */
  readonly total: StatCounter;
  readonly retry: StatCounter;
  readonly retryLimitExceeded: StatCounter;
  readonly retryOverflow: StatCounter;
  readonly retrySuccess: StatCounter;
  /** The route timeout expired. */
  readonly timeout: StatCounter;
  private readonly byStatus = new Map<number, StatusCounters>();
  private time: StatHistogram | undefined;

  constructor(
    private readonly store: RouteStatsStore,
    private readonly vhost: string,
    private readonly prefix: string,
  ) {
    const c = (stat: string) => store.counter(this.stat(stat));
    this.total = c('upstream_rq_total');
    this.retry = c('upstream_rq_retry');
    this.retryLimitExceeded = c('upstream_rq_retry_limit_exceeded');
    this.retryOverflow = c('upstream_rq_retry_overflow');
    this.retrySuccess = c('upstream_rq_retry_success');
    this.timeout = c('upstream_rq_timeout');
  }

  /**
   * The status the router answers with, the upstream's or its own local reply after it took the
   * request (no healthy upstream, overflow, timeout, reset), as Envoy's chargeUpstreamCode.
   */
  response(status: number): void {
    let c = this.byStatus.get(status);
    if (!c) this.byStatus.set(status, (c = this.statusCounters(status)));
    c.completed.inc();
    c.group?.inc();
    c.code.inc();
  }

  /** A response that went downstream complete, after `ms` (upstream_rq_time). */
  responseTime(ms: number): void {
    (this.time ??= this.store.histogram(this.stat('upstream_rq_time'))).record(ms);
  }

  private stat(stat: string): StatName {
    return routeStatName(this.vhost, this.prefix, stat);
  }

  /**
   * Envoy's code stat names: a status of 100-599 by its number, any other as `unknown`; the group
   * by its hundreds, none outside 1xx-5xx (where Envoy counts a stat without a leaf name, which is
   * left out here).
   */
  private statusCounters(status: number): StatusCounters {
    const c = (stat: string) => this.store.counter(this.stat(stat));
    const hundreds = Math.floor(status / 100);
    return {
      completed: c('upstream_rq_completed'),
      group: hundreds >= 1 && hundreds <= 5 ? c(`upstream_rq_${hundreds}xx`) : undefined,
      code: c(status >= 100 && status <= 599 ? `upstream_rq_${status}` : 'upstream_rq_unknown'),
    };
  }
}
