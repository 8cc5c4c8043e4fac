// A cluster's upstream HTTP protocol and connection limits, from its HttpProtocolOptions
// (typed_extension_protocol_options) or the legacy Cluster fields: HTTP/1.1, HTTP/2 or the
// downstream's, common_http_protocol_options, and HTTP/2's max_concurrent_streams. What of them
// the proxy does not apply is logged.
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { Http2ProtocolOptionsSchema, type Http2ProtocolOptions } from '../gen/envoy/config/core/v3/protocol_pb.js';
import { HttpProtocolOptionsSchema } from '../gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { scope } from '../common/log.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import { typeNameOf } from '../envoy/types.js';
import { unpackConfig } from './extensions.js';
import { connectionLimitsOf, unappliedCommonFields, type ConnectionLimits } from './connection-limits.js';

const log = scope('upstream');

const HTTP_PROTOCOL_OPTIONS = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';
const APPLIED_HTTP2 = ['maxConcurrentStreams'];

/** What an upstream request speaks: HTTP/1.1, HTTP/2, or what its downstream request spoke. */
export type UpstreamProtocolChoice = 'http1' | 'http2' | 'downstream';

/** Fields of the HTTP protocol options this proxy applies to upstream connections; the others are logged. */
const APPLIED_COMMON_HTTP = ['idleTimeout', 'maxRequestsPerConnection', 'maxConnectionDuration'];
const UNAPPLIED_UPSTREAM_HTTP = ['upstreamHttpProtocolOptions', 'httpFilters', 'headerValidationConfig'];

export interface UpstreamProtocol {
  readonly protocol: UpstreamProtocolChoice;
  readonly connection: ConnectionLimits;
  /** 0: no limit of ours (the upstream's SETTINGS still bound it). */
  readonly maxConcurrentStreams: number;
}

/** max_concurrent_streams of the HTTP/2 options; the other fields (window sizes, keepalive) are node:http2's defaults, and logged. */
function http2Streams(h2: Http2ProtocolOptions | undefined, field: string): number {
  if (!h2) return 0;
  const names = Http2ProtocolOptionsSchema.fields.map((f) => f.localName).filter((n) => !APPLIED_HTTP2.includes(n));
  const unapplied = unappliedFields(Http2ProtocolOptionsSchema, h2, names);
  if (unapplied.length > 0) log.warn(`${field}: accepted but not applied yet: ${unapplied.join(', ')}`);
  return h2.maxConcurrentStreams ?? 0;
}

/**
 * The upstream protocol and connection limits from `typed_extension_protocol_options`
 * (HttpProtocolOptions with an explicit HTTP/1 or HTTP/2 config, or the downstream's, and its
 * common_http_protocol_options), else the legacy `http2_protocol_options`,
 * `common_http_protocol_options` and `max_requests_per_connection` of the Cluster.
 */
export function compileUpstreamProtocol(c: Cluster, field: string): UpstreamProtocol {
  let protocol: UpstreamProtocolChoice = c.http2ProtocolOptions ? 'http2' : 'http1';
  let maxConcurrentStreams = http2Streams(c.http2ProtocolOptions, `${field}.http2_protocol_options`);
  let common = c.commonHttpProtocolOptions;
  let commonField = `${field}.common_http_protocol_options`;
  for (const [name, any] of Object.entries(c.typedExtensionProtocolOptions)) {
    const f = `${field}.typed_extension_protocol_options[${JSON.stringify(name)}]`;
    const typeName = typeNameOf(any.typeUrl);
    if (typeName !== HTTP_PROTOCOL_OPTIONS) {
      log.warn(`${f}: protocol options of type ${typeName} are not applied`);
      continue;
    }
    const opts = unpackConfig(any, HttpProtocolOptionsSchema, f);
    const unapplied = unappliedFields(HttpProtocolOptionsSchema, opts, UNAPPLIED_UPSTREAM_HTTP);
    if (unapplied.length > 0) log.warn(`${f}: accepted but not applied yet: ${unapplied.join(', ')}`);
    if (opts.commonHttpProtocolOptions) {
      common = opts.commonHttpProtocolOptions;
      commonField = `${f}.common_http_protocol_options`;
    }
    const u = opts.upstreamProtocolOptions;
    if (u.case === 'explicitHttpConfig') {
      const p = u.value.protocolConfig.case;
      if (p === 'http3ProtocolOptions') throw new ConfigError(`${f}.explicit_http_config`, 'HTTP/3 upstreams are not supported; use http_protocol_options or http2_protocol_options');
      protocol = p === 'http2ProtocolOptions' ? 'http2' : 'http1';
      if (p === 'http2ProtocolOptions') maxConcurrentStreams = http2Streams(u.value.protocolConfig.value, `${f}.explicit_http_config.http2_protocol_options`);
    } else if (u.case === 'useDownstreamProtocolConfig') {
      if (u.value.http3ProtocolOptions) throw new ConfigError(`${f}.use_downstream_protocol_config.http3_protocol_options`, 'HTTP/3 upstreams are not supported');
      protocol = 'downstream';
      maxConcurrentStreams = http2Streams(u.value.http2ProtocolOptions, `${f}.use_downstream_protocol_config.http2_protocol_options`);
    } else if (u.case === 'autoConfig') {
      log.warn(`${f}: auto_config is not supported yet; using ${protocol === 'http2' ? 'HTTP/2' : 'HTTP/1.1'}`);
    }
  }
  if (common) {
    const unapplied = unappliedCommonFields(common, APPLIED_COMMON_HTTP);
    if (unapplied.length > 0) log.warn(`${commonField}: accepted but not applied yet: ${unapplied.join(', ')}`);
  }
  const limits = connectionLimitsOf(common);
  // The deprecated Cluster field counts when the options do not say.
  const connection = common?.maxRequestsPerConnection === undefined && c.maxRequestsPerConnection !== undefined ? { ...limits, maxRequests: c.maxRequestsPerConnection } : limits;
  return { protocol, connection, maxConcurrentStreams };
}

