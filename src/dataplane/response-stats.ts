// What Envoy's router charges per response and per retry decision, kept both for a cluster
// (`cluster.<name>.<stat>`) and for a route with a stat_prefix (route-stats.ts): upstream_rq_retry,
// _retry_limit_exceeded, _retry_overflow, _retry_success (0 until counted), and as responses come
// upstream_rq_completed, upstream_rq_<N>xx, upstream_rq_<code> and the upstream_rq_time histogram.
// Counting allocates nothing once a status has been seen.
import type { StatHistogram } from './histograms.js';
import type { StatCounter, StatName, StatsStore } from './stats.js';

export type ResponseStatsStore = Pick<StatsStore, 'counter' | 'histogram'>;

/** The counters one response status charges. */
interface StatusCounters {
  readonly completed: StatCounter;
  readonly group: StatCounter | undefined;
  readonly code: StatCounter;
}

/**
 * Envoy's default tags of code stats on a stat's last name part: `envoy_response_code`
 * (`upstream_rq_200` -> `upstream_rq`) and `envoy_response_code_class` (`upstream_rq_2xx` ->
 * `upstream_rq_xx`); any other leaf as it is.
 */
export function codeTags(leaf: string): { readonly leaf: string; readonly labels: Readonly<Record<string, string>> } {
  const code = /_rq_(\d{3})$/.exec(leaf);
  if (code) return { leaf: leaf.slice(0, -4), labels: { envoy_response_code: code[1]! } };
  const codeClass = /_rq_(\d)xx$/.exec(leaf);
  if (codeClass) return { leaf: `${leaf.slice(0, -3)}xx`, labels: { envoy_response_code_class: codeClass[1]! } };
  return { leaf, labels: {} };
}

export class ResponseStats {
  readonly retry: StatCounter;
  readonly retryLimitExceeded: StatCounter;
  readonly retryOverflow: StatCounter;
  readonly retrySuccess: StatCounter;
  private readonly byStatus = new Map<number, StatusCounters>();
  private time: StatHistogram | undefined;

  constructor(
    protected readonly store: ResponseStatsStore,
    /** A stat's names (`/stats` and Prometheus, with the tags extracted). */
    protected readonly nameOf: (stat: string) => StatName,
  ) {
    const c = (stat: string) => store.counter(nameOf(stat));
    this.retry = c('upstream_rq_retry');
    this.retryLimitExceeded = c('upstream_rq_retry_limit_exceeded');
    this.retryOverflow = c('upstream_rq_retry_overflow');
    this.retrySuccess = c('upstream_rq_retry_success');
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
    (this.time ??= this.store.histogram(this.nameOf('upstream_rq_time'))).record(ms);
  }

  /**
   * Envoy's code stat names: a status of 100-599 by its number, any other as `unknown`; the group
   * by its hundreds, none outside 1xx-5xx (where Envoy counts a stat without a leaf name, which is
   * left out here).
   */
  private statusCounters(status: number): StatusCounters {
    const c = (stat: string) => this.store.counter(this.nameOf(stat));
    const hundreds = Math.floor(status / 100);
    return {
      completed: c('upstream_rq_completed'),
      group: hundreds >= 1 && hundreds <= 5 ? c(`upstream_rq_${hundreds}xx`) : undefined,
      code: c(status >= 100 && status <= 599 ? `upstream_rq_${status}` : 'upstream_rq_unknown'),
    };
  }
}
