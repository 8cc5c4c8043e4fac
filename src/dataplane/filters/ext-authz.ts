// The ext_authz HTTP filter: asks an external authorizer (HTTP or gRPC service) whether a request
// may go on. Runs only when filter_enabled_metadata matches (the mesh gates it on the CUSTOM rbac
// filter's shadow result). Authorizer allowed: its header mutations apply (to the request, and to
// the client's response where it says so) and the chain goes on;
// denied: its status, body and headers are the reply; unreachable, timed out or a 5xx: with
// failure_mode_allow the request goes on (x-envoy-auth-failure-mode-allowed when asked), else the
// reply is status_on_error (403 by default). Counters as Envoy's, `http.<prefix>.ext_authz.*`.
import { ExtAuthzSchema } from '../../gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { scope } from '../../common/log.js';
import { durationMs } from '../../common/duration.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { compileMetadataMatcher } from '../../envoy/matchers.js';
import { CONTINUE, type FilterOutcome } from '../../envoy/filter.js';
import type { StreamRequest } from '../../envoy/request.js';
import { applyOk, headerNames, responseEdits, type Checker } from '../ext-authz/check.js';
import { httpChecker } from '../ext-authz/http-check.js';
import { grpcChecker } from '../ext-authz/grpc-check.js';
import { registerHttpFilter } from './registry.js';
import { ResponseFlag } from '../../envoy/response-flags.js';

export interface ExtAuthzStats {
  ok: number;
  denied: number;
  error: number;
  disabled: number;
  failure_mode_allowed: number;
}

declare module './registry.js' {
  interface HttpFilterStatsByGroup {
    ext_authz: ExtAuthzStats;
  }
}

const log = scope('ext_authz');

/** Envoy's default timeout of the authorization call when the service sets none. */
const DEFAULT_TIMEOUT_MS = 200;
const FAILURE_MODE_HEADER = 'x-envoy-auth-failure-mode-allowed';

/** Set fields this proxy accepts without applying them (logged at compile, never silently dropped). */
const UNAPPLIED = [
  'withRequestBody', 'clearRouteCache', 'validateMutations', 'metadataContextNamespaces', 'typedMetadataContextNamespaces',
  'routeMetadataContextNamespaces', 'routeTypedMetadataContextNamespaces', 'filterEnabled', 'denyAtDisable', 'includePeerCertificate',
  'statPrefix', 'bootstrapMetadataLabelsKey', 'includeTlsSession', 'encodeRawHeaders', 'decoderHeaderMutationRules', 'enableDynamicMetadataIngestion',
];

registerHttpFilter({
  schema: ExtAuthzSchema,
  compile(config, name, ctx) {
    if (!ctx.clusters) throw new ConfigError('', 'ext_authz needs the cluster manager');
    const unapplied = unappliedFields(ExtAuthzSchema, config, UNAPPLIED);
    if (unapplied.length) log.warn(`${name}: accepted but not applied yet: ${unapplied.join(', ')}`);
    const enabled = config.filterEnabledMetadata ? compileMetadataMatcher(config.filterEnabledMetadata, 'filter_enabled_metadata') : () => true;
    const disallowed = headerNames(config.disallowedHeaders, 'disallowed_headers', false);
    const svc = config.services;
    let checker: Checker;
    if (svc.case === 'httpService') {
      const allowed = headerNames(config.allowedHeaders, 'allowed_headers', false);
      const timeoutMs = durationMs(svc.value.serverUri?.timeout, DEFAULT_TIMEOUT_MS);
      checker = httpChecker({ service: svc.value, timeoutMs, allowed, disallowed, clusters: ctx.clusters }, 'http_service');
    } else if (svc.case === 'grpcService') {
      // gRPC authorizers get every header unless allowed_headers narrows them (Envoy's legacy default).
      const allowed = headerNames(config.allowedHeaders, 'allowed_headers', true);
      const timeoutMs = durationMs(svc.value.timeout, DEFAULT_TIMEOUT_MS);
      checker = grpcChecker({ service: svc.value, timeoutMs, allowed, disallowed, clusters: ctx.clusters }, 'grpc_service');
    } else {
      throw new ConfigError('services', 'an http_service or a grpc_service is required');
    }
    const statusOnError = config.statusOnError?.code || 403;
    const stats: ExtAuthzStats = { ok: 0, denied: 0, error: 0, disabled: 0, failure_mode_allowed: 0 };
    const onError = (req: StreamRequest, reason: string): FilterOutcome => {
      stats.error++;
      if (config.failureModeAllow) {
        stats.failure_mode_allowed++;
        log.debug(`${req.method} ${req.path}: authorizer failed (${reason}); allowed by failure_mode_allow`);
        if (config.failureModeAllowHeaderAdd) req.headers.set(FAILURE_MODE_HEADER, 'true');
        return CONTINUE;
      }
      log.debug(`${req.method} ${req.path}: authorizer failed (${reason}); ${statusOnError}`);
      return { kind: 'reply', reply: { status: statusOnError, body: '', headers: {}, details: 'ext_authz_error', responseFlag: ResponseFlag.UnauthorizedExternalService } };
    };
    return {
      filter: {
        name,
        async decodeHeaders(req) {
          if (!enabled(req.metadata)) {
            stats.disabled++;
            return CONTINUE;
          }
          const r = await checker.check(req);
          if (r.kind === 'error') return onError(req, r.reason);
          if (r.kind === 'denied') {
            stats.denied++;
            return { kind: 'reply', reply: { status: r.status, body: r.body, headers: r.headers, details: 'ext_authz_denied', responseFlag: ResponseFlag.UnauthorizedExternalService } };
          }
          stats.ok++;
          applyOk(req, r);
          const encodeHeaders = responseEdits(r.response);
          return encodeHeaders ? { kind: 'continue', encodeHeaders } : CONTINUE;
        },
      },
      stats: { name, ext_authz: stats },
    };
  },
});
