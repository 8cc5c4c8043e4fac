// The ext_authz HTTP service: the check is an HTTP request to the authorizer's cluster with the
// original method, `path_prefix` + the original path, no body, and only the allowed headers
// (Host, Method, Path, Content-Length and Authorization always, as Envoy). 200 allows, a 5xx is an
// error (failure_mode_allow applies), anything else denies with the authorizer's status and body.
import type { HttpService } from '../../gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import type { StreamRequest } from '../../envoy/request.js';
import { checkedHeaders, headerNames, NO_MUTATIONS, type CheckOptions, type CheckResult, type Checker } from './check.js';

/** Always sent to an HTTP authorizer, whatever allowed_headers says. */
const ALWAYS_SENT = new Set(['host', 'content-length', 'authorization']);
/** Headers of the authorizer's answer that describe that answer, not the request or the reply. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'host', 'date', 'upgrade', 'proxy-connection', 'te', 'trailer']);
/** Added to allowed_client_headers by Envoy whenever that list is set. */
const CLIENT_ALWAYS = ['status', 'www-authenticate', 'location'];

export function httpChecker(o: CheckOptions<HttpService>, field: string): Checker {
  const s = o.service;
  const uri = s.serverUri;
  if (!uri || uri.httpUpstreamType.case !== 'cluster' || !uri.httpUpstreamType.value) throw new ConfigError(`${field}.server_uri.cluster`, 'a cluster is required');
  const cluster = uri.httpUpstreamType.value;
  const prefix = s.pathPrefix;
  const toAdd = (s.authorizationRequest?.headersToAdd ?? []).map((h) => [h.key.toLowerCase(), h.value] as const);
  const r = s.authorizationResponse;
  const upstream = headerNames(r?.allowedUpstreamHeaders, `${field}.authorization_response.allowed_upstream_headers`, false);
  const upstreamAppend = headerNames(r?.allowedUpstreamHeadersToAppend, `${field}.authorization_response.allowed_upstream_headers_to_append`, false);
  const clientSet = r?.allowedClientHeaders && r.allowedClientHeaders.patterns.length > 0;
  const clientMatch = headerNames(r?.allowedClientHeaders, `${field}.authorization_response.allowed_client_headers`, true);
  const client = (name: string) => (clientSet ? CLIENT_ALWAYS.includes(name) || clientMatch(name) : true);
  const clientOnSuccess = headerNames(r?.allowedClientHeadersOnSuccess, `${field}.authorization_response.allowed_client_headers_on_success`, false);
  const sent = (name: string) => (ALWAYS_SENT.has(name) || o.allowed(name)) && !o.disallowed(name);

  return {
    async check(req: StreamRequest): Promise<CheckResult> {
      const c = o.clusters.get(cluster);
      const ep = c?.pick(req);
      if (!c || !ep) return { kind: 'error', reason: c ? `no healthy endpoint in cluster ${cluster}` : `no cluster ${cluster}` };
      const headers: Record<string, string> = {};
      for (const [k, v] of checkedHeaders(req, sent)) if (!k.startsWith(':')) headers[k] = v;
      headers['host'] = req.authority;
      headers['content-length'] = '0';
      for (const [k, v] of toAdd) headers[k] = v;
      let res;
      try {
        res = await c.http1.pool(ep).request({ method: req.method, path: prefix + req.path, headers, signal: AbortSignal.timeout(o.timeoutMs) });
      } catch (e) {
        return { kind: 'error', reason: (e as Error).name === 'TimeoutError' ? `timed out after ${o.timeoutMs} ms` : (e as Error).message };
      }
      let body: string;
      try {
        body = await res.body.text();
      } catch (e) {
        return { kind: 'error', reason: `reading the answer: ${(e as Error).message}` };
      }
      if (res.statusCode >= 500) return { kind: 'error', reason: `authorizer answered ${res.statusCode}` };
      const answer = Object.entries(res.headers).flatMap(([k, v]) => (v === undefined ? [] : (Array.isArray(v) ? v : [v]).map((one) => [k.toLowerCase(), String(one)] as const)));
      if (res.statusCode === 200) {
        return {
          kind: 'ok',
          set: answer.filter(([k]) => !HOP_BY_HOP.has(k) && upstream(k)),
          append: answer.filter(([k]) => !HOP_BY_HOP.has(k) && upstreamAppend(k)),
          addIfAbsent: [],
          remove: [],
          // Envoy adds these to the response the client gets (they never reach the upstream).
          response: { ...NO_MUTATIONS, append: answer.filter(([k]) => !HOP_BY_HOP.has(k) && clientOnSuccess(k)) },
        };
      }
      const out: Record<string, string[]> = Object.create(null) as Record<string, string[]>;
      for (const [k, v] of answer) if (!HOP_BY_HOP.has(k) && client(k)) (out[k] ??= []).push(v);
      return { kind: 'denied', status: res.statusCode, body, headers: out };
    },
  };
}
