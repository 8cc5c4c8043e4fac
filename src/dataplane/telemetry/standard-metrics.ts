// The standard metrics one stats filter records (istio_requests_total, istio_request_duration_milliseconds,
// istio_request_bytes, istio_response_bytes; istio_tcp_* for connections), named and labelled as
// the Go mesh's stats filter names them, so dashboards and alerts written for it read them
// unchanged. They live in the proxy's stats store: `/stats` shows `istiocustom.istio_requests_total.<label>.<value>...`,
// `/stats/prometheus` the metric with its labels; a worker's are summed with the main process's.
import type { ClusterManager } from '../clusters.js';
import type { StatName, StatsStore } from '../stats.js';
import type { StreamInfo } from '../access-log/record.js';
import { grpcStatus, headerBytes, localCertificate, requestHeaderBytes } from '../access-log/stream-facts.js';
import { firstUriSan } from '../access-log/record.js';
import { isGrpc } from '../http-codec.js';
import { responseFlagsString } from '../../envoy/response-flags.js';
import type { AttributeSource } from '../../envoy/attribute-expression.js';
import type { MetricOverrides, StandardMetric } from './metric-overrides.js';
import { standardLabels, type ClusterService, type LabelContext, type Labels, type StreamFacts } from './standard-labels.js';
import { streamAttributes } from './stream-attributes.js';
import type { LocalNode } from './workload-metadata.js';
import { SeriesCache, type HttpSeries } from './series-cache.js';
import type { ConnectionWatch } from '../listener/network-filters.js';

/** This proxy's certificate URI SAN on a downstream connection: read once per connection, not per request. */
const localSans = new WeakMap<object, string>();

/** A cached series' labels use no attribute: none is read. */
const NO_ATTRIBUTES: AttributeSource = () => undefined;

/** Envoy's custom stat namespace: it prefixes the dotted names and is left out of the Prometheus ones. */
const NAMESPACE = 'istiocustom';

export interface StandardMetricsOptions {
  readonly labels: LabelContext;
  readonly node: LocalNode;
  readonly stats: StatsStore;
  readonly overrides: MetricOverrides | undefined;
  /** For the upstream cluster's `mesh.services` metadata. */
  readonly clusters: ClusterManager | undefined;
}

/** The first service of a cluster's `mesh.services` metadata (the Go mesh's `istio.services`). */
export function clusterServiceOf(clusters: ClusterManager | undefined, name: string | undefined): ClusterService | undefined {
  const services = name === undefined ? undefined : clusters?.get(name)?.metadata?.filterMetadata['mesh']?.['services'];
  const first = Array.isArray(services) ? services[0] : undefined;
  if (typeof first !== 'object' || first === null || Array.isArray(first) || typeof first['host'] !== 'string') return undefined;
  return typeof first['name'] === 'string' ? { host: first['host'], name: first['name'] } : { host: first['host'] };
}

export class StandardMetrics {
  /** The series of streams whose labels need no attribute of the stream itself (no expression in the overrides). */
  private readonly series: SeriesCache | undefined;

  constructor(private readonly o: StandardMetricsOptions) {
    this.series = o.overrides?.dynamic ? undefined : new SeriesCache((f) => this.httpSeries(standardLabels(o.labels, f), NO_ATTRIBUTES));
  }

  /** One HTTP stream ended. */
  http(info: StreamInfo): void {
    const facts = this.httpFacts(info);
    const s = this.series ? this.series.of(facts) : this.httpSeries(standardLabels(this.o.labels, facts), streamAttributes(info, this.o.node));
    s.requests?.inc();
    s.duration?.record(info.durationMs);
    s.requestBytes?.record((requestHeaderBytes(info) ?? 0) + info.bytesReceived);
    s.responseBytes?.record((headerBytes(info.responseHeaders, info.responseCode === 0 ? 0 : ':status'.length + 3) ?? 0) + info.bytesSent);
  }

  private httpFacts(info: StreamInfo): StreamFacts {
    const serving = this.o.labels.reporter !== 'source';
    const request = info.request;
    const grpc = isGrpc(request?.headers.joined('content-type'));
    const status = grpc ? grpcStatus(info) : undefined;
    return {
      peer: serving ? request?.downstreamPeer : request?.upstreamPeer,
      // Read only where it can be a label: the cache key stays short.
      ...(request && this.o.labels.hostFallback ? { authority: request.authority } : {}),
      ...(info.routeName !== undefined ? { routeName: info.routeName } : {}),
      ...this.cluster(info.upstreamCluster),
      ...this.principals(info, serving),
      protocol: grpc ? 'grpc' : 'http',
      responseCode: info.responseCode,
      ...(status !== undefined ? { grpcStatus: status } : {}),
      responseFlags: responseFlagsString(info.responseFlags),
    };
  }

  private httpSeries(labels: Labels, attributes: AttributeSource): HttpSeries {
    const stats = this.o.stats;
    const stat = (metric: StandardMetric): StatName | undefined => {
      const l = this.labelsOf(metric, labels, attributes);
      return l ? statOf(metric, l) : undefined;
    };
    const histogram = (metric: StandardMetric) => {
      const n = stat(metric);
      return n ? stats.histogram(n) : undefined;
    };
    const requests = stat('requests_total');
    return {
      requests: requests ? stats.counter(requests) : undefined,
      duration: histogram('request_duration_milliseconds'),
      requestBytes: histogram('request_bytes'),
      responseBytes: histogram('response_bytes'),
    };
  }

  /**
   * One tcp_proxy connection: opened once its upstream is up (or at its close, if it never was),
   * its bytes every report interval and at the close, then closed. Its labels are computed once,
   * when it opens. No peer workload is known: there is no TCP metadata exchange here.
   */
  tcp(info: StreamInfo, reportIntervalMs: number): ConnectionWatch {
    let labels: Labels | undefined;
    let attributes: AttributeSource | undefined;
    let sent = 0;
    let received = 0;
    const open = (): void => {
      if (labels) return;
      const serving = this.o.labels.reporter !== 'source';
      labels = standardLabels(this.o.labels, { peer: undefined, ...this.cluster(info.upstreamCluster), ...this.principals(info, serving), protocol: 'tcp', responseFlags: responseFlagsString(info.responseFlags) });
      attributes = streamAttributes(info, this.o.node);
      this.counter('tcp_connections_opened_total', labels, attributes, 1);
    };
    const bytes = (): void => {
      open();
      this.counter('tcp_sent_bytes_total', labels!, attributes!, info.bytesSent - sent);
      this.counter('tcp_received_bytes_total', labels!, attributes!, info.bytesReceived - received);
      sent = info.bytesSent;
      received = info.bytesReceived;
    };
    return {
      reportIntervalMs,
      connected: open,
      report: bytes,
      closed: () => {
        bytes();
        this.counter('tcp_connections_closed_total', labels!, attributes!, 1);
      },
    };
  }

  private cluster(name: string | undefined): Pick<StreamFacts, 'clusterName' | 'clusterService'> {
    if (name === undefined) return {};
    const service = clusterServiceOf(this.o.clusters, name);
    return service ? { clusterName: name, clusterService: service } : { clusterName: name };
  }

  /** The connection's certificates: the downstream one's when serving, the upstream one's as a client. */
  private principals(info: StreamInfo, serving: boolean): Pick<StreamFacts, 'peerSan' | 'localSan'> {
    if (!serving) return { peerSan: info.upstreamPeerUriSan, localSan: info.upstreamLocalUriSan };
    const socket = info.downstream.socket;
    let localSan = socket ? localSans.get(socket) : '';
    if (localSan === undefined) localSans.set(socket!, (localSan = firstUriSan(localCertificate(info)?.subjectaltname)));
    return { peerSan: info.downstream.peer?.uriSans[0] ?? '', localSan };
  }

  private labelsOf(metric: StandardMetric, labels: Labels, attributes: AttributeSource): Labels | undefined {
    return this.o.overrides ? this.o.overrides.labels(metric, labels, attributes) : labels;
  }

  private counter(metric: StandardMetric, labels: Labels, attributes: AttributeSource, n: number): void {
    const l = this.labelsOf(metric, labels, attributes);
    if (l) this.o.stats.counter(statOf(metric, l)).inc(n);
  }
}

export function statOf(metric: StandardMetric, labels: Labels): StatName {
  let name = `${NAMESPACE}.istio_${metric}`;
  for (const [k, v] of labels) name += `.${k}.${v}`;
  return { name, prom: `istio_${metric}`, labels: Object.fromEntries(labels) };
}
