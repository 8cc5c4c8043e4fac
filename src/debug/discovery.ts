// The discovery server's debug endpoints (--httpAddr and --monitoringAddr, when ENABLE_DEBUG_ON_HTTP):
// what each proxy was sent and acked, its full config as Envoy would dump it, the config and
// registry the server sees, and, beyond the Go mesh, the authorization decision explained (by the
// data plane's own compiled filters, see security/explain.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JsonValue } from '@bufbuild/protobuf';
import { KINDS, type AuthorizationPolicy, type RequestAuthentication } from '../api/types.js';
import type { ConfigStore } from '../config/store.js';
import type { Proxy } from '../model/proxy.js';
import type { PushContext } from '../model/push-context.js';
import type { WorkloadRef } from '../model/selection.js';
import type { ServiceRegistry } from '../registry/types.js';
import type { JwksResolver } from '../security/authn/jwks-resolver.js';
import { ConfigError } from '../envoy/config-error.js';
import { explainForWorkload, type ExplainRequest } from '../security/explain.js';
import type { HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { buildWorkloadSecurity, securityHttpFilters, securityNetworkFilters, type SecurityOptions } from '../security/filters.js';
import type { ProxyInfo, ResourceGenerator } from '../xds/generator.js';
import type { ProxyModels } from '../xds/generators/index.js';
import type { XdsServer } from '../xds/server.js';
import { messageNameOf, registry as envoyTypes, unpackAny } from '../envoy/types.js';
import { toJson } from '@bufbuild/protobuf';
import { BodyTooLarge, readBody, sendJson, type Mux } from './http.js';

export interface DiscoveryDebugDeps {
  readonly xds: XdsServer;
  readonly generators: ReadonlyMap<string, ResourceGenerator>;
  readonly pushContext: () => PushContext;
  readonly store: ConfigStore;
  readonly registry: ServiceRegistry;
  readonly resolver: JwksResolver;
  /** The builders' options (--plugins, mesh config providers) for a push, as the server uses them. */
  readonly securityOptions?: (push: PushContext) => SecurityOptions;
  /** The server's view of its connected proxies (the one its generators use). */
  readonly proxies: ProxyModels;
  /** ENABLE_ADMIN_ENDPOINTS: serve the endpoints that change the server's state. */
  readonly adminEndpoints: boolean;
  /** Every WorkloadEntry (the user's and the auto-registered) with its Healthy condition. */
  readonly workloadEntries: () => unknown[];
}

/** A request the user got wrong: 400 with the reason. */
class BadRequest extends Error {}

function connectedProxy(deps: DiscoveryDebugDeps, url: URL): ProxyInfo {
  const id = url.searchParams.get('proxyID');
  if (!id) throw new BadRequest('missing query parameter proxyID (a connected proxy\'s node id; see /debug/connections)');
  const info = deps.xds.proxyInfo(id);
  if (!info) throw new BadRequest(`proxy "${id}" is not connected (see /debug/connections)`);
  return info;
}

/** Envoy's JSON of a packed resource (with its `@type`), as a config dump shows it. */
function anyJson(any: Parameters<typeof unpackAny>[0]): JsonValue {
  const msg = unpackAny(any);
  return { '@type': any.typeUrl, ...(toJson(envoyTypes.getMessage(msg.$typeName)!, msg, { registry: envoyTypes }) as object) };
}

/** The proxy's config as the server generates it now, per type, in Envoy's JSON mapping. */
async function configDump(deps: DiscoveryDebugDeps, info: ProxyInfo): Promise<JsonValue> {
  const dump: Record<string, JsonValue> = {};
  for (const [typeUrl, gen] of deps.generators) {
    const watch = deps.xds.connections().find((c) => c.proxyId === info.id)?.watches.find((w) => w.typeUrl === typeUrl);
    const subscription = { wildcard: watch ? watch.wildcard : true, names: new Set(watch?.names ?? []) };
    const resources = await gen.generate({ proxy: info, typeUrl, subscription });
    dump[messageNameOf(typeUrl)] = resources.map((r) => ({ name: r.name, ...(watch?.acked ? { ackedVersion: watch.acked.version } : {}), resource: anyJson(r.resource) }));
  }
  return dump;
}

/** The workload a request names: a connected proxy (proxyID), or a namespace and labels. */
function workloadOf(deps: DiscoveryDebugDeps, body: Record<string, unknown>): WorkloadRef {
  if (typeof body.proxyID === 'string') {
    const info = deps.xds.proxyInfo(body.proxyID);
    if (!info) throw new BadRequest(`proxy "${body.proxyID}" is not connected (see /debug/connections)`);
    return deps.proxies.of(info);
  }
  if (typeof body.namespace === 'string') {
    const labels = body.labels ?? {};
    if (typeof labels !== 'object' || labels === null || Object.values(labels).some((v) => typeof v !== 'string')) throw new BadRequest('labels must be an object of strings');
    return { namespace: body.namespace, labels: labels as Record<string, string> };
  }
  throw new BadRequest('name the workload: "proxyID" (a connected proxy) or "namespace" with optional "labels"');
}

function policies(deps: DiscoveryDebugDeps): { ra: RequestAuthentication[]; ap: AuthorizationPolicy[] } {
  return { ra: deps.store.list('RequestAuthentication'), ap: deps.store.list('AuthorizationPolicy') };
}

async function jsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readBody(req, 64 * 1024);
  } catch (e) {
    if (e instanceof BodyTooLarge) throw new BadRequest(e.message);
    throw e;
  }
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new BadRequest('the body must be a JSON object');
    return v as Record<string, unknown>;
  } catch (e) {
    if (e instanceof BadRequest) throw e;
    throw new BadRequest(`the body is not valid JSON: ${(e as Error).message}`);
  }
}

function stringRecord(v: unknown, field: string): Record<string, string> {
  if (v === undefined) return {};
  if (typeof v !== 'object' || v === null || Object.values(v).some((x) => typeof x !== 'string')) throw new BadRequest(`${field} must be an object of strings`);
  return v as Record<string, string>;
}

function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const v = body[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new BadRequest(`${field} must be a string`);
  return v;
}

/** The synthetic request of /debug/authz_explain; everything but the workload is optional. */
function explainRequest(body: Record<string, unknown>): ExplainRequest {
  const port = body.destinationPort;
  if (port !== undefined && (typeof port !== 'number' || !Number.isInteger(port) || port < 0 || port > 65535)) throw new BadRequest('destinationPort must be a port number');
  const optional = ['host', 'token', 'sourcePrincipal', 'sourceIp', 'remoteIp', 'destinationIp', 'sni'] as const;
  const extra: Record<string, string> = {};
  for (const f of optional) {
    const v = optionalString(body, f);
    if (v !== undefined) extra[f] = v;
  }
  return {
    method: optionalString(body, 'method') ?? 'GET',
    path: optionalString(body, 'path') ?? '/',
    headers: stringRecord(body.headers, 'headers'),
    ...extra,
    ...(typeof port === 'number' ? { destinationPort: port } : {}),
  };
}

/** Wraps a handler so a BadRequest becomes a 400 naming what is wrong. */
function guarded(fn: (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void> | void) {
  return async (req: IncomingMessage, res: ServerResponse, url: URL) => {
    try {
      await fn(req, res, url);
    } catch (e) {
      if (e instanceof BadRequest) sendJson(res, 400, { error: e.message });
      else throw e;
    }
  };
}

/**
 * The Go mesh serves its one state-changing debug endpoint only with its admin-endpoints switch:
 * otherwise the path is unknown (404), not refused, and /debug does not list it.
 */
function installAdminEndpoints(mux: Mux, deps: DiscoveryDebugDeps): void {
  mux.handle(
    '/debug/force_disconnect',
    '?proxyID=: end the proxy\'s xDS streams so it reconnects (ENABLE_ADMIN_ENDPOINTS)',
    guarded((_req, res, url) => {
      const info = connectedProxy(deps, url);
      const ended = deps.xds.disconnect(info.id, 'disconnected by /debug/force_disconnect');
      sendJson(res, 200, { proxyID: info.id, streamsEnded: ended });
    }),
  );
}

export function installDiscoveryDebug(mux: Mux, deps: DiscoveryDebugDeps): void {
  if (deps.adminEndpoints) installAdminEndpoints(mux, deps);
  mux
    .handle('/debug/connections', 'connected proxies: id, peer, protocol, since', (_req, res) =>
      sendJson(res, 200, deps.xds.connections().map(({ connectionId, proxyId, peer, protocol, connectedAt }) => ({ connectionId, proxyId, peer, protocol, connectedAt }))),
    )
    .handle('/debug/oversized', 'xDS responses held back for exceeding the message size limit, per stream and type', (_req, res) => sendJson(res, 200, deps.xds.sizes.list()))
    .handle('/debug/adsz', 'every xDS stream with its watches, subscriptions and NACKs', (_req, res) => sendJson(res, 200, deps.xds.connections()))
    .handle('/debug/syncz', 'per proxy and type: sent and acked versions, sync state', (_req, res) =>
      sendJson(
        res,
        200,
        deps.xds.connections().map((c) => ({
          proxyId: c.proxyId,
          connectionId: c.connectionId,
          types: Object.fromEntries(c.watches.map((w) => [w.type, { state: w.state, sent: w.sent?.version, acked: w.acked?.version, nonce: w.sent?.nonce, lastNack: w.lastNack?.message }])),
        })),
      ),
    )
    .handle('/debug/push_status', 'the current push context: version, services, clusters without instances', (_req, res) => {
      const push = deps.pushContext();
      sendJson(res, 200, { version: push.version, services: push.services.length, virtualServices: push.virtualServiceCount, clustersWithoutInstances: push.clustersWithoutInstances(), proxies: deps.xds.connections().length });
    })
    .handle('/debug/configz', 'every config resource the server holds', (_req, res) => sendJson(res, 200, KINDS.flatMap((k) => deps.store.list(k))))
    .handle('/debug/workloadentryz', 'every WorkloadEntry, auto-registered ones too, with its Healthy condition and whether it is an endpoint', (_req, res) => sendJson(res, 200, deps.workloadEntries()))
    .handle('/debug/registryz', 'every service of every registry', (_req, res) => sendJson(res, 200, deps.registry.services()))
    .handle('/debug/endpointz', 'every service with its instances', (_req, res) =>
      sendJson(res, 200, deps.registry.services().map((s) => ({ hostname: s.hostname, namespace: s.namespace, instances: deps.registry.instances(s) }))),
    )
    .handle('/debug/config_dump', "?proxyID=: the proxy's config in Envoy's JSON, with the versions it acked", guarded(async (_req, res, url) => sendJson(res, 200, await configDump(deps, connectedProxy(deps, url)))))
    .handle(
      '/debug/authorizationz',
      '?proxyID=: the policies selecting the proxy and the jwt_authn/rbac filters generated from them (HTTP chains, and the network rbac filters of TCP chains)',
      guarded((_req, res, url) => {
        const proxy: Proxy = deps.proxies.of(connectedProxy(deps, url));
        const push = deps.pushContext();
        const sec = buildWorkloadSecurity(proxy, push.policiesFor('RequestAuthentication', proxy), push.policiesFor('AuthorizationPolicy', proxy), deps.resolver.lookup, push.rootNamespace, deps.securityOptions?.(push));
        const name = (p: { metadata: { namespace: string; name: string }; kind: string }) => `${p.kind}/${p.metadata.namespace}/${p.metadata.name}`;
        const filterJson = (f: HttpFilter | Filter) => ({ name: f.name, typedConfig: f.configType.case === 'typedConfig' ? anyJson(f.configType.value) : null });
        sendJson(res, 200, {
          proxyID: proxy.id,
          requestAuthentications: sec.requestAuthentications.map(name),
          authorizationPolicies: sec.authorizationPolicies.map(name),
          warnings: sec.warnings,
          httpFilters: securityHttpFilters(sec).map(filterJson),
          networkFilters: securityNetworkFilters(sec).map(filterJson),
        });
      }),
    )
    .handle(
      '/debug/authz_explain',
      'POST {proxyID | namespace+labels, method, path, host, headers, token, sourcePrincipal, sourceIp, remoteIp, destinationIp, destinationPort, sni}: the data plane\'s decision (allow/401/403) and the policy, rule and condition behind it',
      guarded(async (req, res) => {
        if (req.method !== 'POST') throw new BadRequest('use POST with a JSON body');
        const body = await jsonBody(req);
        const workload = workloadOf(deps, body);
        const { ra, ap } = policies(deps);
        let result;
        try {
          result = await explainForWorkload({
            workload,
            requestAuthentications: ra,
            authorizationPolicies: ap,
            lookup: deps.resolver.lookup,
            request: explainRequest(body),
            onUnknownKid: (issuer, kid) => deps.resolver.refreshForUnknownKid(issuer, kid),
            rootNamespace: deps.pushContext().rootNamespace,
            ...(deps.securityOptions ? { options: deps.securityOptions(deps.pushContext()) } : {}),
          });
        } catch (e) {
          // The data plane refuses the generated config: the proxy would NACK it and keep its last one.
          if (e instanceof ConfigError) throw new BadRequest(`the data plane refuses the workload's generated filters: ${e.message}`);
          throw e;
        }
        sendJson(res, 200, result);
      }),
    );
}
