// Gateways as a router proxy sees them: the Gateway resources that select it (by `selector`, within
// its namespace under PILOT_SCOPE_GATEWAY_TO_NAMESPACE), their servers merged per port the way the
// Go mesh merges them (HTTP servers share one route configuration `http.<port>`, TLS servers are
// told apart by SNI, conflicting servers are dropped and reported), and the VirtualServices bound
// to each Gateway by name. Pure; networking/gateway*.ts turn the result into Envoy resources.
import { compareByNamespacedName } from '../common/compare.js';
import type { Gateway, GatewayServer, SERVER_TLS_MODES, VirtualService } from '../api/types.js';
import { isHttpProtocol, parseProtocol, type Protocol } from './service.js';
import { labelsMatch } from './selection.js';
import { exportedTo, resolveHost } from './traffic.js';
import { serverTlsNotices } from './gateway-credentials.js';

export { GATEWAY_CREDENTIAL_PREFIX, parseGatewayCredential } from './gateway-credentials.js';

export type ServerTlsMode = (typeof SERVER_TLS_MODES)[number];

/** The ServerTLSSettings fields the translation reads (the API's names). */
export interface ServerTls {
  readonly httpsRedirect?: boolean;
  readonly mode?: ServerTlsMode;
  readonly serverCertificate?: string;
  readonly privateKey?: string;
  readonly caCertificates?: string;
  readonly credentialName?: string;
  /** Several credentials (an RSA and an ECDSA certificate): the client's signature algorithms pick one. */
  readonly credentialNames?: readonly string[];
  /** Several file pairs, as credentialNames. */
  readonly tlsCertificates?: readonly ServerTlsCertificate[];
  /** The client CA of MUTUAL from this credential instead of `<credentialName>-cacert`. */
  readonly caCertCredentialName?: string;
  readonly caCrl?: string;
  readonly subjectAltNames?: readonly string[];
  readonly verifyCertificateSpki?: readonly string[];
  readonly verifyCertificateHash?: readonly string[];
  /** Accept any client certificate (Envoy's ACCEPT_UNTRUSTED). */
  readonly insecureSkipVerify?: boolean;
  readonly minProtocolVersion?: string;
  readonly maxProtocolVersion?: string;
  readonly cipherSuites?: readonly string[];
  readonly ecdhCurves?: readonly string[];
}

export interface ServerTlsCertificate {
  readonly serverCertificate?: string;
  readonly privateKey?: string;
  readonly caCertificates?: string;
}

/** One server of one Gateway, its hosts with `./` made explicit and `*` namespaces dropped. */
export interface BoundServer {
  /** `<namespace>/<name>` of the Gateway. */
  readonly gateway: string;
  readonly gatewayNamespace: string;
  readonly server: GatewayServer;
  readonly protocol: Protocol | undefined;
  readonly tls: ServerTls | undefined;
  readonly hosts: readonly string[];
  /** The port the proxy listens on (the service port translated to its target port). */
  readonly listenPort: number;
  /** The route configuration of an HTTP server or a TLS-terminating HTTPS one; '' for the others. */
  readonly routeName: string;
}

/** Servers sharing one listener port, protocol and bind. */
export interface MergedPort {
  readonly port: number;
  readonly protocol: Protocol | undefined;
  readonly bind: string;
  readonly servers: BoundServer[];
}

export interface MergedGateway {
  /** In the order their first server was met (Gateways in namespace/name order). */
  readonly ports: readonly MergedPort[];
  /** Servers of each route configuration name. */
  readonly byRouteName: ReadonlyMap<string, readonly BoundServer[]>;
  /** Servers left out, one sentence each (`Gateway foo/gw: server 1 on port 80 ...`). */
  readonly rejected: readonly string[];
}

/** HTTP, HTTP2, GRPC (and gRPC-Web) servers: one plaintext connection manager per port. */
function isHttp(p: Protocol | undefined): boolean {
  return p !== undefined && isHttpProtocol(p);
}

export function isPassthrough(tls: ServerTls | undefined): boolean {
  return tls?.mode === 'PASSTHROUGH' || tls?.mode === 'AUTO_PASSTHROUGH';
}

/** Whether a server of the merged gateway is AUTO_PASSTHROUGH (it then needs the SNI-DNAT clusters). */
export function hasAutoPassthrough(merged: MergedGateway): boolean {
  return merged.ports.some((p) => p.servers.some((s) => s.tls?.mode === 'AUTO_PASSTHROUGH'));
}

/** A non-HTTP server with TLS settings (HTTPS, TLS): told apart from others on its port by SNI. */
function isTlsServer(s: Pick<BoundServer, 'protocol' | 'tls'>): boolean {
  return s.tls !== undefined && !isHttp(s.protocol);
}

/** An HTTPS server whose TLS the gateway terminates: an HTTP connection manager behind TLS. */
export function terminatesHttps(s: Pick<BoundServer, 'protocol' | 'tls'>): boolean {
  return s.protocol === 'HTTPS' && s.tls !== undefined && !isPassthrough(s.tls);
}

function servesHttp(s: Pick<BoundServer, 'protocol' | 'tls'>): boolean {
  return isHttp(s.protocol) || terminatesHttps(s);
}

/** `./host` is the Gateway's namespace, `*\/host` any namespace (plain `host`), `*\/*` everything. */
function sanitizeHosts(hosts: readonly string[], ns: string): string[] {
  const out: string[] = [];
  for (const h of hosts) {
    const slash = h.indexOf('/');
    if (slash < 0) out.push(h);
    else if (h.slice(0, slash) === '.') out.push(`${ns}/${h.slice(slash + 1)}`);
    else if (h.slice(0, slash) === '*') {
      if (h.slice(slash + 1) === '*') return ['*'];
      out.push(h.slice(slash + 1));
    } else out.push(h);
  }
  return out;
}

/** The host part of `ns/host`. */
export function hostOf(h: string): string {
  const slash = h.indexOf('/');
  return slash < 0 ? h : h.slice(slash + 1);
}

/**
 * The Go mesh's route configuration names: `http.<port>` for HTTP servers (all of a port share it),
 * `https.<port>.<portName>.<gateway>.<namespace>` for HTTPS servers it terminates; a bind address
 * is appended to both. Other servers have none.
 */
function routeNameOf(s: GatewayServer, protocol: Protocol | undefined, tls: ServerTls | undefined, listenPort: number, gw: Gateway): string {
  const bind = s.bind ? `.${s.bind}` : '';
  if (isHttp(protocol)) return `http.${listenPort}${bind}`;
  if (protocol === 'HTTPS' && !isPassthrough(tls)) return `https.${s.port.number}.${s.port.name ?? ''}.${gw.metadata.name}.${gw.metadata.namespace}${bind}`;
  return '';
}

/** The SNI names a TLS server is matched by: its hosts without namespace, once each, sorted. */
export function sniHosts(s: BoundServer): string[] {
  return [...new Set(s.hosts.map(hostOf))].sort();
}

/**
 * The Gateways that select a router proxy: every Gateway (only its own namespace's with
 * `scopeToNamespace`) whose selector labels the proxy carries; no selector selects every gateway
 * proxy, as in the Go mesh. In namespace/name order.
 */
export function gatewaysForProxy(
  gateways: readonly Gateway[],
  proxy: { readonly namespace: string; readonly labels: Readonly<Record<string, string>> },
  scopeToNamespace: boolean,
): Gateway[] {
  return gateways
    .filter((g) => (!scopeToNamespace || g.metadata.namespace === proxy.namespace) && labelsMatch(g.spec.selector, proxy.labels))
    .sort(compareByNamespacedName);
}

/**
 * The servers of `gateways` merged per listener port. `listenPort` maps a server port to the port
 * the proxy listens on (a gateway service's port to its target port). Rules, as the Go mesh's:
 * - a TLS server (any server with `tls`) whose host another TLS server of the port already has
 *   (same bind) is dropped;
 * - plaintext servers of one port merge when both are HTTP; another protocol on that port and bind
 *   is a conflict and dropped;
 * - TLS servers share a port with each other (SNI tells them apart); two terminating HTTPS servers
 *   need distinct route names.
 */
export function mergeGateways(gateways: readonly Gateway[], listenPort: (port: number) => number = (p) => p): MergedGateway {
  const merged = new Map<string, MergedPort>();
  const ports: MergedPort[] = [];
  const byRouteName = new Map<string, BoundServer[]>();
  const rejected: string[] = [];
  const seenPorts = new Set<number>();
  const plaintext = new Map<number, MergedPort>();
  const tlsHosts = new Map<number, Map<string, string>>();
  const tlsBinds = new Map<number, Set<string>>();

  const key = (port: number, protocol: Protocol | undefined, bind: string) => `${port}|${protocol ?? ''}|${bind}`;
  const addPort = (s: BoundServer): MergedPort => {
    const m: MergedPort = { port: s.listenPort, protocol: s.protocol, bind: s.server.bind ?? '', servers: [s] };
    merged.set(key(m.port, m.protocol, m.bind), m);
    ports.push(m);
    return m;
  };

  for (const gw of gateways) {
    const gwName = `${gw.metadata.namespace}/${gw.metadata.name}`;
    (gw.spec.servers ?? []).forEach((server, index) => {
      const protocol = parseProtocol(server.port.protocol);
      const tls = server.tls as ServerTls | undefined;
      const port = listenPort(server.port.number);
      const bind = server.bind ?? '';
      const s: BoundServer = {
        gateway: gwName,
        gatewayNamespace: gw.metadata.namespace,
        server,
        protocol,
        tls,
        hosts: sanitizeHosts(server.hosts, gw.metadata.namespace),
        listenPort: port,
        routeName: routeNameOf(server, protocol, tls, port, gw),
      };
      const reject = (why: string) => rejected.push(`Gateway ${gwName}: servers[${index}] (port ${server.port.number} ${server.port.protocol ?? ''}) ${why}; the server is ignored`);
      if (tls) {
        const known = tlsHosts.get(port) ?? new Map<string, string>();
        tlsHosts.set(port, known);
        const dups = s.hosts.filter((h) => known.get(h) === bind);
        if (dups.length > 0) return reject(`repeats host ${dups.join(', ')} of another TLS server on the port`);
        s.hosts.forEach((h) => known.set(h, bind));
      }
      const route = (list: BoundServer[] | undefined) => (s.routeName ? byRouteName.set(s.routeName, [...(list ?? []), s]) : undefined);
      if (!seenPorts.has(port)) {
        seenPorts.add(port);
        const m = addPort(s);
        if (!isTlsServer(s)) plaintext.set(port, m);
        if (servesHttp(s)) route(undefined);
        return;
      }
      const current = plaintext.get(port);
      if (current) {
        const sameBind = current.bind === bind;
        if (sameBind && !(isHttp(protocol) && (isHttp(current.protocol) || current.protocol === protocol))) {
          return reject(`conflicts with the ${current.protocol ?? 'unknown'} server already on port ${port}`);
        }
        if (sameBind && !s.routeName) return reject(`cannot share port ${port} with another plaintext server`);
        const target = sameBind ? current : merged.get(key(port, protocol, bind));
        if (target) target.servers.push(s);
        else addPort(s);
        route(byRouteName.get(s.routeName));
        return;
      }
      if (!isTlsServer(s)) {
        plaintext.set(port, addPort(s));
        if (servesHttp(s)) route(undefined);
        return;
      }
      if (servesHttp(s)) {
        if (!s.routeName || byRouteName.has(s.routeName)) return reject(`has the route name ${s.routeName || '(none)'} of another HTTPS server; give its port a distinct name`);
        route(undefined);
      }
      const binds = tlsBinds.get(port) ?? new Set<string>();
      tlsBinds.set(port, binds);
      binds.add(bind);
      const m = merged.get(key(port, protocol, bind));
      if (m) m.servers.push(s);
      else addPort(s);
    });
  }
  return { ports, byRouteName, rejected };
}

/**
 * A VirtualService's `gateways` entry as `<namespace>/<name>`: `ns/name` as written, a short name
 * in the VirtualService's namespace; `mesh` stays `mesh`.
 */
export function resolveGatewayName(entry: string, vsNamespace: string): string {
  if (entry === 'mesh') return entry;
  const slash = entry.indexOf('/');
  if (slash >= 0) return entry.slice(0, slash) === '.' ? `${vsNamespace}/${entry.slice(slash + 1)}` : entry;
  // The Go mesh's legacy form `name.namespace.svc.<domain>`.
  const dot = entry.indexOf('.');
  if (dot > 0) {
    const ns = entry.slice(dot + 1).split('.')[0]!;
    return `${ns}/${entry.slice(0, dot)}`;
  }
  return `${vsNamespace}/${entry}`;
}

/** A VirtualService bound to Gateways, hosts resolved as for sidecars. */
export interface GatewayVirtualService {
  readonly vs: VirtualService;
  readonly hosts: readonly string[];
  /** `<namespace>/<name>` of each Gateway it names. */
  readonly gateways: ReadonlySet<string>;
}

/** VirtualServices by the Gateways they name. */
export class GatewayIndex {
  readonly gateways: readonly Gateway[];
  private readonly bound: readonly GatewayVirtualService[];

  /** `vsExportTo`: the mesh config's defaultVirtualServiceExportTo (all namespaces unless set). */
  constructor(gateways: readonly Gateway[], virtualServices: readonly VirtualService[], domain: string, private readonly vsExportTo?: readonly string[]) {
    this.gateways = [...gateways].sort(compareByNamespacedName);
    this.bound = [...virtualServices]
      .sort(compareByNamespacedName)
      .map((vs) => ({
        vs,
        hosts: (vs.spec.hosts ?? []).map((h) => resolveHost(h, vs.metadata.namespace, domain)),
        gateways: new Set((vs.spec.gateways ?? []).map((g) => resolveGatewayName(g, vs.metadata.namespace)).filter((g) => g !== 'mesh')),
      }))
      .filter((v) => v.gateways.size > 0);
  }

  /** Every VirtualService naming `gateway`, exportTo aside (the Go mesh's per-Gateway destination index). */
  boundTo(gateway: string): readonly VirtualService[] {
    return this.bound.filter((v) => v.gateways.has(gateway)).map((v) => v.vs);
  }

  /** VirtualServices naming `gateway` and exported to the proxy's namespace, in namespace/name order. */
  virtualServicesFor(gateway: string, proxyNamespace: string): readonly GatewayVirtualService[] {
    return this.bound.filter((v) => v.gateways.has(gateway) && exportedTo(v.vs.spec.exportTo, v.vs.metadata.namespace, proxyNamespace, this.vsExportTo));
  }
}

/**
 * The server hosts a VirtualService of namespace `vsNamespace` may attach to: `ns/host` entries of
 * other namespaces are left out, the rest lose their namespace.
 */
export function hostsForNamespace(serverHosts: readonly string[], vsNamespace: string): string[] {
  return serverHosts.flatMap((h) => {
    const slash = h.indexOf('/');
    if (slash < 0) return [h];
    const ns = h.slice(0, slash);
    return ns === '*' || ns === vsNamespace ? [h.slice(slash + 1)] : [];
  });
}

/**
 * What a Gateway sets that the translation does not honour, as sentences naming the resource and
 * field. `credentialsServed`: the discovery server serves credentialName secrets (MESHD_ENABLE_SDS_SERVER).
 */
export function gatewayNotices(gw: Gateway, credentialsServed = false): string[] {
  const name = `Gateway ${gw.metadata.namespace}/${gw.metadata.name}`;
  return (gw.spec.servers ?? []).flatMap((s, i) => serverTlsNotices((s.tls ?? {}) as Record<string, unknown>, `servers[${i}].tls`, gw.metadata.namespace, credentialsServed).map((m) => `${name}: ${m}`));
}

const L4_MATCH = new Set(['port', 'gateways', 'sniHosts']);
const L4_ROUTE = new Set(['destination', 'weight']);

/**
 * What the `tcp` and `tls` routes of a VirtualService bound only to Gateways set that gateways do not
 * honour (sidecars report these routes whole, see traffic-notices.ts).
 */
export function gatewayRouteNotices(vs: VirtualService): string[] {
  const gws = vs.spec.gateways ?? [];
  if (gws.length === 0 || gws.includes('mesh')) return [];
  const name = `VirtualService ${vs.metadata.namespace}/${vs.metadata.name}`;
  return (['tcp', 'tls'] as const).flatMap((kind) =>
    (vs.spec[kind] ?? []).flatMap((r, i) => [
      ...Object.keys(r).filter((k) => k !== 'match' && k !== 'route').map((k) => `${kind}[${i}].${k}`),
      ...((r['match'] as Record<string, unknown>[] | undefined) ?? []).flatMap((m, j) => Object.keys(m).filter((k) => !L4_MATCH.has(k)).map((k) => `${kind}[${i}].match[${j}].${k}`)),
      ...((r['route'] as Record<string, unknown>[] | undefined) ?? []).flatMap((d, j) => Object.keys(d).filter((k) => !L4_ROUTE.has(k)).map((k) => `${kind}[${i}].route[${j}].${k}`)),
    ]),
  ).map((p) => `${name}: ${p} is not effective yet on gateways`);
}
