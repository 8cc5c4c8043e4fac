// A cluster that serves: picks an endpoint for each request by the cluster's load-balancing policy
// over its usable endpoints (the outlier detector's ejections left out), counts what it picks, and
// owns the cluster's connection pools. Its spec is swapped on CDS/EDS updates while the pools and
// the per-endpoint request counts stay.
import { maglev, ringHash, type HashTable } from './load-balancers.js';
import { ActiveRequests, leastRequestPick } from './least-request.js';
import { SlowStartClock } from './slow-start.js';
import { CircuitBreaker, OutlierDetector, type OutlierOutcome, type OutlierSpec } from './cluster-health.js';
import { Http1Pool, type Endpoint, type PoolOptions, type UpstreamCluster, type UpstreamTimeout } from './upstream-pools.js';
import { Http2Pool } from './http2-pool.js';
import type { UpstreamTransport } from './tls/transport-sockets.js';
import type { RequestView } from '../envoy/request.js';
import type { StatCounter } from './stats.js';
import type { UpstreamCxStats } from './upstream-cx-stats.js';
import type { ResponseStats } from './response-stats.js';
import type { RequestGauges } from './upstream-rq-stats.js';
import { TcpPool } from './tcp-pool.js';
import type { ClusterSpec, WeightedEndpoint } from './cluster-spec.js';
import type { Metadata } from '../gen/envoy/config/core/v3/base_pb.js';
import { chooseHostSet, HostSetCache } from './host-sets.js';
import { byWeight, RoundRobin } from './round-robin.js';

/** `host:port` / `[v6]:port` from a header, or undefined. */
function parseHostPort(v: string): Endpoint | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(v.trim());
  if (!m) return undefined;
  const port = Number(m[3]);
  return port >= 1 && port <= 65535 ? { host: (m[1] ?? m[2])!, port } : undefined;
}

export interface ClusterStats {
  readonly noneHealthy: StatCounter;
  /** lb_healthy_panic: requests load balanced over a priority level in panic. */
  readonly panic: StatCounter;
  /** upstream_rq_timeout and upstream_rq_per_try_timeout. */
  readonly timeout: Readonly<Record<UpstreamTimeout, StatCounter>>;
  /** What the pools count of the cluster's connections. */
  readonly cx: UpstreamCxStats;
  /** The pools' request gauges, and upstream_rq_total (counted as a request reaches a connection). */
  readonly requests: RequestGauges;
  /** What the router charges per response and retry decision (response-stats.ts). */
  readonly responses: ResponseStats;
}

/** A serving cluster: the spec can be swapped under it (EDS updates) while its pool stays. */
export class LiveCluster implements UpstreamCluster {
  readonly http1: Http1Pool;
  readonly tcp: TcpPool;
  private pool?: Http2Pool;
  /** Round robin over the hosts (a locality's own when balancing by locality). */
  private readonly order = new RoundRobin();
  /** Weighted least-request state, one per endpoint of the current spec. */
  private current: number[] = [];
  readonly breaker: CircuitBreaker;
  private outlier?: OutlierDetector;
  /** Kept across spec updates: requests in flight stay counted on their endpoint. */
  private readonly active = new ActiveRequests();
  /** Kept across spec updates: when each endpoint joined, for slow start. */
  private readonly joined = new SlowStartClock();
  /** What requests are load balanced over now (priority levels, ejections, panic). */
  private readonly hostSets = new HostSetCache();
  /** The current spec's endpoints by host and port (transportOf), made on first use. */
  private transports?: Map<string, Map<number, WeightedEndpoint>>;

  constructor(
    public spec: ClusterSpec,
    readonly stats: ClusterStats,
  ) {
    this.http1 = new Http1Pool(this.poolOptions());
    this.tcp = new TcpPool(this.poolOptions());
    this.breaker = new CircuitBreaker(spec.circuit);
    this.setOutlier(spec.outlier);
    this.joined.observe(spec.allEndpoints, spec.slowStart, Date.now());
  }

  /** The pools read the current spec on each use, so an update (connect timeout, limits) applies to them. */
  private poolOptions(): PoolOptions {
    return {
      settings: () => this.spec,
      transportOf: (ep) => this.transportOf(ep),
      count: this.stats.cx,
      requests: this.stats.requests,
    };
  }

  private setOutlier(o: OutlierSpec | undefined): void {
    if (!o) this.outlier = undefined;
    else if (this.outlier) this.outlier.spec = o;
    else this.outlier = new OutlierDetector(o);
  }

  begin(endpoint: Endpoint): () => void {
    return this.active.begin(endpoint);
  }

  report(endpoint: Endpoint, outcome: OutlierOutcome): void {
    this.outlier?.report(endpoint, outcome, this.spec.allEndpoints);
  }

  timedOut(kind: UpstreamTimeout): void {
    this.stats.timeout[kind].inc();
  }

  get responses(): ResponseStats {
    return this.stats.responses;
  }

  /** The HTTP/2 sessions, made on first use; undefined while the cluster speaks HTTP/1.1 only. */
  get http2(): Http2Pool | undefined {
    if (this.spec.protocol === 'http1') return undefined;
    this.pool ??= new Http2Pool(this.poolOptions());
    return this.pool;
  }

  get followsDownstream(): boolean {
    return this.spec.protocol === 'downstream';
  }

  /** The current transport of an endpoint: its match among the cluster's endpoints, else the cluster's own. */
  transportOf(ep: Endpoint): UpstreamTransport | undefined {
    // Asked for each request (the pools key connections by ALPN): a lookup, built once per spec.
    this.transports ??= transportsByEndpoint(this.spec.allEndpoints);
    const known = this.transports.get(ep.host)?.get(ep.port);
    return known ? known.transport : this.spec.transports.fallback;
  }

  /** Lets in-flight requests finish and keeps no connection. */
  retire(): void {
    this.http1.retire();
    this.pool?.retire();
  }

  destroy(): void {
    this.http1.destroy();
    this.pool?.destroy();
  }

  get name(): string {
    return this.spec.name;
  }

  get metadata(): Metadata | undefined {
    return this.spec.message.metadata;
  }

  update(spec: ClusterSpec): void {
    // A protocol change starts a fresh session pool; the old one finishes its streams.
    if (spec.protocol !== this.spec.protocol && this.pool) {
      this.pool.retire();
      this.pool = undefined;
    }
    this.spec = spec;
    this.transports = undefined;
    this.breaker.limits = spec.circuit;
    this.setOutlier(spec.outlier);
    this.current = [];
    this.joined.observe(spec.allEndpoints, spec.slowStart, Date.now());
  }

  /** Hosts healthy and not ejected now, over all priority levels. */
  get healthyCount(): number {
    return this.hostSets.current(this.spec, this.outlier).healthy;
  }

  /** Whether outlier detection has the endpoint ejected now. */
  ejected(e: Endpoint): boolean {
    return (this.outlier?.ejectedUntil(e) ?? 0) > Date.now();
  }

  pick(req: RequestView, hash?: () => bigint | undefined, excludedPriorities?: ReadonlySet<number>): Endpoint | undefined {
    const ep = this.choose(req, hash, excludedPriorities);
    if (!ep) this.stats.noneHealthy.inc();
    return ep;
  }

  /** The consistent-hash table of the current endpoint set, rebuilt when the set changes. */
  private table?: { eps: readonly WeightedEndpoint[]; key: string; lookup: HashTable };

  private consistentPick(eps: readonly WeightedEndpoint[], hash: bigint): Endpoint {
    // The same endpoint array (no update, no ejection since) is the same set: no key to build.
    if (this.table?.eps !== eps) {
      const c = this.spec.consistent!;
      const key = eps.map((e) => `${e.host}:${e.port}/${e.weight}`).join(',');
      if (this.table?.key === key) this.table.eps = eps;
      else this.table = { eps, key, lookup: c.kind === 'ring' ? ringHash(eps, c.min, c.max) : maglev(eps, c.size) };
    }
    return eps[this.table.lookup(hash)]!;
  }

  private choose(req: RequestView, hashKey: (() => bigint | undefined) | undefined, excludedPriorities: ReadonlySet<number> | undefined): Endpoint | undefined {
    const s = this.spec;
    if (s.kind === 'original_dst') {
      // The header when the cluster reads one, else where the client sent the connection, as
      // restored by a use_original_dst listener (never the proxy's own listener address).
      const v = s.originalDstHeader ? req.header(s.originalDstHeader) : undefined;
      if (v) return parseHostPort(v);
      const d = req.destination;
      return d.restored ? { host: d.address, port: d.port } : undefined;
    }
    const set = chooseHostSet(this.hostSets.current(s, this.outlier), excludedPriorities);
    if (!set || set.endpoints.length === 0) return undefined;
    if (set.panic) this.stats.panic.inc();
    const hash = s.consistent ? hashKey?.() : undefined;
    if (hash !== undefined) return this.consistentPick(set.endpoints, hash);
    // Locality-weighted balancing: a locality first, by its effective weight, then a host of it.
    const locality = set.localities?.order.pick(set.localities.choices, byWeight, false);
    const eps = (locality ?? set).endpoints;
    const warming = s.slowStart ? this.joined.weights(s.slowStart, Date.now()) : undefined;
    if (s.leastRequest) return leastRequestPick(eps, s.leastRequest, this.active, this.current, Math.random, warming);
    if (s.random || s.consistent) return eps[Math.floor(Math.random() * eps.length)];
    const order = locality?.order ?? this.order;
    return warming ? order.pick(eps, warming, false) : order.pick(eps, byWeight, (locality ?? set).equalWeights);
  }
}

function transportsByEndpoint(eps: readonly WeightedEndpoint[]): Map<string, Map<number, WeightedEndpoint>> {
  const byHost = new Map<string, Map<number, WeightedEndpoint>>();
  for (const e of eps) {
    const ports = byHost.get(e.host) ?? byHost.set(e.host, new Map()).get(e.host)!;
    // The first endpoint of a host and port decides, as the linear search did.
    if (!ports.has(e.port)) ports.set(e.port, e);
  }
  return byHost;
}
