// The fields of an HttpConnectionManager this proxy accepts but does not apply yet: the connection
// manager logs them when set, so that a config relying on them is not silently served otherwise.
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import { Http1ProtocolOptionsSchema } from '../gen/envoy/config/core/v3/protocol_pb.js';
import { HttpConnectionManagerSchema, type HttpConnectionManager } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { unappliedFields } from '../envoy/config-error.js';
import { unappliedCommonFields } from './connection-limits.js';

/** Set fields of the HCM that this proxy does not apply yet (logged when present). */
const UNAPPLIED_HCM = [
  'tracing', 'accessLogOptions', 'accessLogFlushInterval', 'flushAccessLogOnNewRequest', 'http2ProtocolOptions', 'drainTimeout', 'localReplyConfig',
  'internalAddressConfig', 'originalIpDetectionExtensions', 'via',
];

/** http_protocol_options fields not honoured (accept_http_10 is, in request-guards.ts). */
const UNAPPLIED_HTTP1 = ['allowAbsoluteUrl', 'defaultHostForHttp10', 'headerKeyFormat', 'enableTrailers', 'allowChunkedLength', 'overrideStreamErrorOnInvalidHttpMessage', 'sendFullyQualifiedUrl', 'useBalsaParser', 'allowCustomMethods'];

/**
 * common_http_protocol_options: every field but these, which are applied (request-guards.ts,
 * listener/downstream-limits.ts for the downstream connection's lifetime, and
 * listener/stream-timeouts.ts for max_stream_duration).
 */
const APPLIED_COMMON = ['maxHeadersCount', 'idleTimeout', 'maxRequestsPerConnection', 'maxStreamDuration'];

/** The unapplied fields set in a sub-message of the HCM, named `<field>.<sub-field>`. */
function unappliedIn<D extends DescMessage>(field: string, schema: D, msg: MessageShape<D> | undefined, names: readonly string[]): string[] {
  return msg ? unappliedFields(schema, msg, names).map((f) => `${field}.${f}`) : [];
}

/** The set fields of `hcm` that are not applied, by their proto names (`common_http_protocol_options.max_stream_duration`). */
export function unappliedHcmFields(hcm: HttpConnectionManager): string[] {
  return [
    ...unappliedFields(HttpConnectionManagerSchema, hcm, UNAPPLIED_HCM),
    ...unappliedIn('http_protocol_options', Http1ProtocolOptionsSchema, hcm.httpProtocolOptions, UNAPPLIED_HTTP1),
    ...(hcm.commonHttpProtocolOptions ? unappliedCommonFields(hcm.commonHttpProtocolOptions, APPLIED_COMMON).map((f) => `common_http_protocol_options.${f}`) : []),
  ];
}
