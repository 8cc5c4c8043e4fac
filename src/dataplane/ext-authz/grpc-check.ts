// The ext_authz gRPC service: envoy.service.auth.v3.Authorization/Check on the authorizer's
// cluster, with the request's attributes filled as Envoy fills them (peers, HTTP method, path with
// query, host, scheme, headers, size). status OK allows with the answer's header mutations; any
// other status denies with the denied_response (403 when it has no status); a failed call is an error.
import { create } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import type { GrpcService } from '../../gen/envoy/config/core/v3/grpc_service_pb.js';
import { HeaderValueOption_HeaderAppendAction, type HeaderValueOption } from '../../gen/envoy/config/core/v3/base_pb.js';
import { CheckRequestSchema, type CheckRequest, type CheckResponse } from '../../gen/envoy/service/auth/v3/external_auth_pb.js';
import { authorizationCheck } from '../../envoy/auth-service.js';
import { ConfigError } from '../../envoy/config-error.js';
import type { Predicate } from '../../envoy/matchers.js';
import type { Address, StreamRequest } from '../../envoy/request.js';
import { scope } from '../../common/log.js';
import { checkedHeaders, type CheckOptions, type CheckResult, type Checker } from './check.js';

const log = scope('ext_authz');


function peer(a: Address, principal: string) {
  return { address: { address: { case: 'socketAddress' as const, value: { address: a.address, portSpecifier: { case: 'portValue' as const, value: a.port } } } }, principal };
}

/** The CheckRequest for a request, as Envoy builds it. */
export function checkRequestOf(req: StreamRequest, allowed: Predicate<string>): CheckRequest {
  const headers = Object.fromEntries(checkedHeaders(req, allowed));
  const sourcePrincipal = req.peer ? (req.peer.uriSans[0] ?? req.peer.subject) : '';
  const length = Number(req.headers.joined('content-length') ?? -1);
  return create(CheckRequestSchema, {
    attributes: {
      source: peer(req.source, sourcePrincipal),
      destination: peer(req.destination, ''),
      request: {
        time: timestampNow(),
        http: {
          id: req.headers.joined('x-request-id') ?? '',
          method: req.method,
          headers,
          path: req.path,
          host: req.authority,
          scheme: req.scheme,
          size: BigInt(Number.isSafeInteger(length) && length >= 0 ? length : -1),
        },
      },
    },
  });
}

/** An OK answer's headers: `append` true appends, ADD_IF_ABSENT adds when missing, else replace. */
function mutations(options: readonly HeaderValueOption[]) {
  const set: [string, string][] = [];
  const append: [string, string][] = [];
  const addIfAbsent: [string, string][] = [];
  for (const o of options) {
    if (!o.header) continue;
    const pair: [string, string] = [o.header.key.toLowerCase(), o.header.value];
    if (o.append === true) append.push(pair);
    else if (o.append === undefined && o.appendAction === HeaderValueOption_HeaderAppendAction.ADD_IF_ABSENT) addIfAbsent.push(pair);
    else set.push(pair);
  }
  return { set, append, addIfAbsent };
}

function resultOf(res: CheckResponse): CheckResult {
  const code = res.status?.code ?? 0;
  if (code === 0) {
    const ok = res.httpResponse.case === 'okResponse' ? res.httpResponse.value : undefined;
    if (ok && (ok.queryParametersToSet.length || ok.queryParametersToRemove.length)) {
      log.debug('authorizer OK: query parameter mutations are not applied yet');
    }
    return { kind: 'ok', ...mutations(ok?.headers ?? []), remove: (ok?.headersToRemove ?? []).map((h) => h.toLowerCase()), response: mutations(ok?.responseHeadersToAdd ?? []) };
  }
  const denied = res.httpResponse.case === 'deniedResponse' ? res.httpResponse.value : undefined;
  const headers: Record<string, string[]> = Object.create(null) as Record<string, string[]>;
  for (const o of denied?.headers ?? []) if (o.header) (headers[o.header.key.toLowerCase()] ??= []).push(o.header.value);
  const status = denied?.status?.code ? denied.status.code : 403;
  return { kind: 'denied', status, body: denied?.body ?? '', headers };
}

export function grpcChecker(o: CheckOptions<GrpcService>, field: string): Checker {
  const t = o.service.targetSpecifier;
  if (t.case !== 'envoyGrpc' || !t.value.clusterName) throw new ConfigError(`${field}.envoy_grpc.cluster_name`, 'an envoy_grpc cluster is required (google_grpc is not supported)');
  const cluster = t.value.clusterName;
  const authority = t.value.authority || cluster;
  return {
    async check(req) {
      const c = o.clusters.get(cluster);
      const ep = c?.pick(req);
      if (!c || !ep) return { kind: 'error', reason: c ? `no healthy endpoint in cluster ${cluster}` : `no cluster ${cluster}` };
      const address = ep.host.includes(':') ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
      const allowed = (name: string) => o.allowed(name) && !o.disallowed(name);
      try {
        return resultOf(await authorizationCheck(address, authority, checkRequestOf(req, allowed), o.timeoutMs));
      } catch (e) {
        return { kind: 'error', reason: (e as Error).message };
      }
    },
  };
}
