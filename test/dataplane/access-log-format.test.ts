// The access log formatter on its own: format strings and JSON formats compiled as Envoy compiles
// them, applied to records of known streams (a table of format -> record -> line), the filters,
// and the config errors Envoy gives for unknown or malformed operators.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { AccessLogFilterSchema, ComparisonFilter_Op, GrpcStatusFilter_Status } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { SubstitutionFormatStringSchema } from '../../src/gen/envoy/config/core/v3/substitution_format_string_pb.js';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { compileLogFilter } from '../../src/dataplane/access-log/filters.js';
import { compileSubstitutionFormat, DEFAULT_FORMAT, jsonFormatter, textFormatter } from '../../src/dataplane/access-log/formatter.js';
import { StreamInfo } from '../../src/dataplane/access-log/record.js';
import { compileStartTime } from '../../src/dataplane/access-log/start-time.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { requestView } from '../../src/envoy/request.js';
import { ResponseFlag, responseFlagsString } from '../../src/envoy/response-flags.js';

/** A request that went upstream: GET /api?x=1 from 10.0.0.9 to 10.0.0.2:8080, answered 200 by 10.0.0.5:9080 of reviews. */
function upstreamRecord(): StreamInfo {
  const sreq = requestView({
    method: 'GET',
    path: '/api?x=1',
    authority: 'reviews:8080',
    headers: { 'user-agent': 'curl/8', 'x-request-id': '0000abcd-0000-4000-8000-000000000000', 'x-forwarded-for': '10.0.0.9', 'content-type': 'application/grpc' },
    source: { address: '10.0.0.9', port: 40000 },
    destination: { address: '10.0.0.2', port: 8080 },
  });
  const info = new StreamInfo({ socket: undefined, directRemote: sreq.source, remote: sreq.remote, local: sreq.destination, requestedServerName: '', peer: undefined }, sreq, 'HTTP/1.1');
  info.upstreamAttempt('reviews', { host: '10.0.0.5', port: 9080 } as never, 1);
  info.upstreamResponse(200, { 'x-envoy-upstream-service-time': '7', 'content-type': 'text/plain', 'set-cookie': ['a=1', 'b=2'] });
  info.responseTrailers = { 'grpc-status': '14' };
  info.routeName = 'default';
  info.bytesReceived = 3;
  info.bytesSent = 11;
  info.ended();
  return info;
}

/** A connection with no request: what a tcp_proxy or a listener logs. */
function connectionRecord(): StreamInfo {
  const a = { address: '127.0.0.1', port: 5000 };
  const info = new StreamInfo({ socket: undefined, directRemote: a, remote: a, local: { address: '127.0.0.1', port: 15001 }, requestedServerName: '', peer: undefined }, undefined, undefined);
  info.setResponseFlag(ResponseFlag.UpstreamConnectionFailure);
  info.ended();
  return info;
}

const line = (format: string, info: StreamInfo, omitEmpty = false): string => textFormatter(format, 'f', omitEmpty).format(info);

describe('access log text formats', () => {
  const cases: Array<[string, () => StreamInfo, string]> = [
    ['%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%', upstreamRecord, 'GET /api?x=1 HTTP/1.1'],
    ['%REQ(USER-AGENT):4%|%REQ(X-MISSING)%|%REQ(x-missing?user-agent)%', upstreamRecord, 'curl|-|curl/8'],
    ['%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS%', upstreamRecord, '200 - via_upstream -'],
    ['%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% %RESP(SET-COOKIE)% %TRAILER(GRPC-STATUS)%', upstreamRecord, '7 a=1,b=2 14'],
    ['%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %UPSTREAM_CLUSTER_RAW% %UPSTREAM_REQUEST_ATTEMPT_COUNT% %ROUTE_NAME%', upstreamRecord, '10.0.0.5:9080 reviews reviews 1 default'],
    ['%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_DIRECT_REMOTE_ADDRESS%', upstreamRecord, '10.0.0.9:40000 10.0.0.9 10.0.0.2:8080 10.0.0.2 10.0.0.9:40000'],
    ['%BYTES_RECEIVED% %BYTES_SENT% %REQUESTED_SERVER_NAME% %UPSTREAM_LOCAL_ADDRESS%', upstreamRecord, '3 11 - -'],
    ['%REQ_WITHOUT_QUERY(:PATH)%', upstreamRecord, 'Not supported field in StreamInfo: REQ_WITHOUT_QUERY'],
    ['%GRPC_STATUS% %GRPC_STATUS(NUMBER)% %GRPC_STATUS(SNAKE_STRING)%', upstreamRecord, 'Unavailable 14 UNAVAILABLE'],
    ['100%% %RESPONSE_CODE%', upstreamRecord, '100% 200'],
    ['%REQ(:METHOD)% %RESPONSE_CODE% %RESPONSE_FLAGS% %UPSTREAM_HOST% %PROTOCOL%', connectionRecord, '- 0 UF - -'],
    ['%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_LOCAL_PORT%', connectionRecord, '127.0.0.1:5000 15001'],
  ];
  for (const [format, record, expected] of cases) {
    it(format, () => {
      if (expected.startsWith('Not supported')) assert.throws(() => line(format, record()), { message: `f: ${expected}` });
      else assert.equal(line(format, record()), expected);
    });
  }

  it('omit_empty_values: an empty value is nothing, not -', () => {
    assert.equal(line('[%REQ(X-MISSING)%][%UPSTREAM_HOST%]', connectionRecord(), true), '[][]');
  });

  it("Envoy's default format, with the duration and start time as they are", () => {
    const info = upstreamRecord();
    const out = line(DEFAULT_FORMAT, info);
    assert.match(out, /^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET \/api\?x=1 HTTP\/1\.1" 200 - 3 11 \d+ 7 "10\.0\.0\.9" "curl\/8" "0000abcd-0000-4000-8000-000000000000" "reviews:8080" "10\.0\.0\.5:9080"\n$/);
  });

  it('formatter extensions: req_without_query enables REQ_WITHOUT_QUERY; any other is refused by name', () => {
    const sfs = (formatterType: string) =>
      create(SubstitutionFormatStringSchema, {
        format: { case: 'textFormatSource', value: { specifier: { case: 'inlineString', value: '%REQ_WITHOUT_QUERY(:PATH)%' } } },
        formatters: [{ name: 'ext', typedConfig: { typeUrl: `type.googleapis.com/${formatterType}`, value: new Uint8Array() } }],
      });
    assert.equal(compileSubstitutionFormat(sfs('envoy.extensions.formatter.req_without_query.v3.ReqWithoutQuery'), 'log_format').format(upstreamRecord()), '/api');
    assert.throws(() => compileSubstitutionFormat(sfs('envoy.extensions.formatter.cel.v3.Cel'), 'log_format'), (e: Error) => e instanceof ConfigError && e.field === 'log_format.formatters[0]' && /envoy\.extensions\.formatter\.cel\.v3\.Cel/.test(e.message));
  });

  it("unknown and malformed operators are config errors in Envoy's words", () => {
    const err = (format: string) => {
      try {
        line(format, connectionRecord());
      } catch (e) {
        assert.ok(e instanceof ConfigError);
        return e.detail;
      }
      return 'accepted';
    };
    assert.equal(err('%NOPE%'), 'Not supported field in StreamInfo: NOPE');
    assert.equal(err('%REQ%'), 'REQ requires parameters');
    assert.equal(err('x %REQ('), "Incorrect configuration: x %REQ(. Couldn't find valid command at position 2");
    assert.equal(err('%RESPONSE_CODE(x)%'), 'RESPONSE_CODE does not take any parameters or length');
    assert.equal(err('%START_TIME:3%'), 'START_TIME does not allow length to be specified.');
    assert.equal(err('%REQ(A?B?C)%'), 'More than 1 alternative header specified in token: A?B?C');
    assert.equal(err('%GRPC_STATUS(LOUD)%'), 'GRPC_STATUS: unknown format LOUD (CAMEL_STRING, SNAKE_STRING or NUMBER)');
  });
});

describe('access log JSON formats', () => {
  it('an operator alone keeps its type, a mixed value is a string, empty is null; keys sorted; nested objects and literals', () => {
    const f = jsonFormatter({ code: '%RESPONSE_CODE%', method: '%REQ(:METHOD)%', host: '%UPSTREAM_HOST%', mixed: 'code=%RESPONSE_CODE% sni=%REQUESTED_SERVER_NAME%', missing: '%REQ(X-MISSING)%', nested: { bytes: '%BYTES_SENT%', fixed: 1, on: true }, list: ['%RESPONSE_CODE%', 'x'] }, 'json_format');
    const out = f.format(upstreamRecord());
    assert.ok(out.endsWith('\n'));
    assert.equal(out, '{"code":200,"host":"10.0.0.5:9080","list":[200,"x"],"method":"GET","missing":null,"mixed":"code=200 sni=-","nested":{"bytes":11,"fixed":1,"on":true}}\n');
  });

  it('omit_empty_values drops null keys', () => {
    const f = jsonFormatter({ code: '%RESPONSE_CODE%', missing: '%REQ(X-MISSING)%', host: '%UPSTREAM_HOST%' }, 'json_format', true);
    assert.deepEqual(JSON.parse(f.format(connectionRecord())), { code: 0 });
  });

  it('a bad operator inside the JSON names its key', () => {
    assert.throws(() => jsonFormatter({ a: { b: '%NOPE%' } }, 'json_format'), { message: 'json_format.a.b: Not supported field in StreamInfo: NOPE' });
  });
});

describe('START_TIME formats', () => {
  // 2024-03-05T07:08:09.123456789Z, to the microsecond a float of ms keeps.
  const ms = Date.UTC(2024, 2, 5, 7, 8, 9) + 123.456789;
  const cases: Array<[string, string]> = [
    ['', '2024-03-05T07:08:09.123Z'],
    ['%Y-%m-%d %H:%M:%S %z', '2024-03-05 07:08:09 +0000'],
    ['%s', String(Math.floor(ms / 1000))],
    ['%S.%3f', '09.123'],
    ['%6f', '123456'],
    ['%E3S|%Ez|%%|%Q', '09.123|+00:00|%|%Q'],
    ['%a %b %e %j', 'Tue Mar  5 065'],
  ];
  for (const [format, expected] of cases) it(JSON.stringify(format), () => assert.equal(compileStartTime(format)(ms), expected));
  it('%9f: nanoseconds', () => assert.match(compileStartTime('%9f')(ms), /^123456\d{3}$/));
});

describe('access log filters', () => {
  type FilterInit = MessageInitShape<typeof AccessLogFilterSchema>;
  const filter = (f: FilterInit) => compileLogFilter(create(AccessLogFilterSchema, f), 'filter');
  const withStatus = (status: number, flags = 0) => {
    const info = connectionRecord();
    info.responseFlags = flags;
    info.responseCode = status;
    return info;
  };

  it('status_code_filter, and_filter, or_filter', () => {
    const atLeast400 = filter({ filterSpecifier: { case: 'statusCodeFilter', value: { comparison: { op: ComparisonFilter_Op.GE, value: { defaultValue: 400, runtimeKey: 'k' } } } } });
    assert.equal(atLeast400(withStatus(404)), true);
    assert.equal(atLeast400(withStatus(200)), false);
    const is503 = { filterSpecifier: { case: 'statusCodeFilter' as const, value: { comparison: { op: ComparisonFilter_Op.EQ, value: { defaultValue: 503, runtimeKey: 'k' } } } } };
    const le200 = { filterSpecifier: { case: 'statusCodeFilter' as const, value: { comparison: { op: ComparisonFilter_Op.LE, value: { defaultValue: 200, runtimeKey: 'k' } } } } };
    assert.equal(filter({ filterSpecifier: { case: 'orFilter', value: { filters: [is503, le200] } } })(withStatus(503)), true);
    assert.equal(filter({ filterSpecifier: { case: 'andFilter', value: { filters: [is503, le200] } } })(withStatus(503)), false);
  });

  it('response_flag_filter: listed flags, or any flag when none is listed; an unknown flag is a config error', () => {
    const uh = filter({ filterSpecifier: { case: 'responseFlagFilter', value: { flags: ['UH', 'NR'] } } });
    assert.equal(uh(withStatus(503, ResponseFlag.NoHealthyUpstream)), true);
    assert.equal(uh(withStatus(503, ResponseFlag.UpstreamConnectionFailure)), false);
    const any = filter({ filterSpecifier: { case: 'responseFlagFilter', value: {} } });
    assert.equal(any(withStatus(200)), false);
    assert.equal(any(withStatus(200, ResponseFlag.DelayInjected)), true);
    assert.throws(() => filter({ filterSpecifier: { case: 'responseFlagFilter', value: { flags: ['UH', 'XX'] } } }), { message: 'filter.response_flag_filter.flags[1]: unknown response flag "XX"' });
  });

  it('header_filter, grpc_status_filter, duration_filter, runtime_filter, not_health_check_filter', () => {
    assert.equal(filter({ filterSpecifier: { case: 'headerFilter', value: { header: { name: 'user-agent', headerMatchSpecifier: { case: 'presentMatch', value: true } } } } })(upstreamRecord()), true);
    assert.equal(filter({ filterSpecifier: { case: 'headerFilter', value: { header: { name: 'x-nope', headerMatchSpecifier: { case: 'presentMatch', value: true } } } } })(upstreamRecord()), false);
    const unavailable = filter({ filterSpecifier: { case: 'grpcStatusFilter', value: { statuses: [GrpcStatusFilter_Status.UNAVAILABLE] } } });
    assert.equal(unavailable(upstreamRecord()), true);
    assert.equal(filter({ filterSpecifier: { case: 'grpcStatusFilter', value: { statuses: [GrpcStatusFilter_Status.UNAVAILABLE], exclude: true } } })(upstreamRecord()), false);
    assert.equal(filter({ filterSpecifier: { case: 'durationFilter', value: { comparison: { op: ComparisonFilter_Op.GE, value: { defaultValue: 60_000, runtimeKey: 'k' } } } } })(upstreamRecord()), false);
    assert.equal(filter({ filterSpecifier: { case: 'runtimeFilter', value: { runtimeKey: 'k', percentSampled: { numerator: 100 } } } })(upstreamRecord()), true);
    assert.equal(filter({ filterSpecifier: { case: 'runtimeFilter', value: { runtimeKey: 'k', percentSampled: { numerator: 0 } } } })(upstreamRecord()), false);
    assert.equal(filter({ filterSpecifier: { case: 'notHealthCheckFilter', value: {} } })(upstreamRecord()), true);
  });

  it('extension_filter (CEL) and metadata_filter are refused, naming the field', () => {
    assert.throws(() => filter({ filterSpecifier: { case: 'extensionFilter', value: { name: 'envoy.access_loggers.extension_filters.cel' } } }), { message: /^filter\.extension_filter: .*cel/ });
    assert.throws(() => filter({ filterSpecifier: { case: 'metadataFilter', value: {} } }), { message: /^filter\.metadata_filter: / });
  });
});

describe('response flags', () => {
  it("short names comma-joined in Envoy's order, - when none", () => {
    assert.equal(responseFlagsString(0), '-');
    assert.equal(responseFlagsString(ResponseFlag.UpstreamRetryLimitExceeded | ResponseFlag.NoHealthyUpstream | ResponseFlag.DelayInjected), 'UH,DI,URX');
    assert.equal(responseFlagsString(ResponseFlag.DownstreamConnectionTermination | ResponseFlag.FaultInjected), 'FI,DC');
  });
});
