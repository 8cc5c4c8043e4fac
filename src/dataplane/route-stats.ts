// Envoy's route-level stats, kept for a route with a stat_prefix: `vhost.<virtual host
// name>.route.<stat_prefix>.<stat>`, the counters Envoy's router makes with the route (its
// RouteStats: upstream_rq_total and _timeout here, the retry ones and the code stats in
// response-stats.ts, shared with the cluster's). Made once per route as its configuration is
// compiled. A route without a stat_prefix has none.
import { codeTags, ResponseStats, type ResponseStatsStore } from './response-stats.js';
import { promName, type StatCounter, type StatName } from './stats.js';

/** Where route stats live: the proxy's store (same names, same counters across route updates). */
export type RouteStatsStore = ResponseStatsStore;

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
  const { leaf, labels: codes } = codeTags(tokens.pop()!);
  Object.assign(labels, codes);
  const extracted = [...tokens.filter((_, i) => !removed.has(i)), leaf].join('.');
  return { name, prom: promName(extracted), labels };
}

export class RouteStats extends ResponseStats {
  /** An attempt reached a ready upstream connection (counted where the cluster's upstream_rq_total is). */
  readonly total: StatCounter;
  /** The route timeout expired. */
  readonly timeout: StatCounter;

  constructor(store: RouteStatsStore, vhost: string, prefix: string) {
    super(store, (stat) => routeStatName(vhost, prefix, stat));
    this.total = store.counter(this.nameOf('upstream_rq_total'));
    this.timeout = store.counter(this.nameOf('upstream_rq_timeout'));
  }
}
