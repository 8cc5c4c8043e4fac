// tcp_proxy's tunneling_config: the downstream bytes go through an HTTP tunnel to the upstream
// instead of straight onto the connection, as Envoy's HttpUpstream does. A CONNECT request with
// :authority = hostname (or a POST to post_path, "/" by default, when use_post), headers_to_add
// after those; HTTP/2 when the cluster's protocol options ask for it (a stream on its sessions),
// else HTTP/1.1 on a connection of the cluster's TCP pool (http1/tunnel.ts), both beneath the
// cluster's transport socket. The tunnel is up on a 2xx (HTTP/1.1) or a 200 (HTTP/2); any other
// answer ends it as a failed connect. Plain TCP proxying never comes here.
import type { Duplex } from 'node:stream';
import type { ClientHttp2Stream } from 'node:http2';
import { scope } from '../../common/log.js';
import { TcpProxy_TunnelingConfigSchema, type TcpProxy_TunnelingConfig } from '../../gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { applyMutations, compileMutation, HeaderRecord, type HeaderMutation } from '../header-mutations.js';
import { http2For, type Endpoint, type UpstreamCluster, type UpstreamOptions } from '../upstream-pools.js';
import { http1Tunnel } from '../http1/tunnel.js';
import { requestHead } from '../http1/request-head.js';

const log = scope('conn_handler');

const UNAPPLIED = ['propagateResponseHeaders', 'propagateResponseTrailers', 'requestIdExtension', 'requestIdHeader', 'requestIdMetadataKey'];

/** The event an opened tunnel emits once its proxy said yes; errors and closes before it are failed connects. */
export const TUNNEL_READY = 'tunnel';

export interface TunnelSpec {
  readonly hostname: string;
  readonly usePost: boolean;
  readonly postPath: string;
  readonly headers: HeaderMutation;
}

/** The tunneling_config compiled; throws ConfigError naming what mesh-proxy cannot do. */
export function compileTunnel(tc: TcpProxy_TunnelingConfig, field: string): TunnelSpec {
  if (tc.hostname === '') throw new ConfigError(`${field}.hostname`, 'a hostname is required');
  // Envoy substitutes %...% command operators here; mesh-proxy sends literal values only.
  if (tc.hostname.includes('%')) throw new ConfigError(`${field}.hostname`, `command operators (%...%) are not supported: ${JSON.stringify(tc.hostname)}`);
  if (tc.postPath !== '' && !tc.usePost) throw new ConfigError(`${field}.post_path`, 'can only be set with use_post');
  if (tc.postPath !== '' && !tc.postPath.startsWith('/')) throw new ConfigError(`${field}.post_path`, `must start with "/", got ${JSON.stringify(tc.postPath)}`);
  tc.headersToAdd.forEach((h, i) => {
    if (h.header?.value.includes('%')) throw new ConfigError(`${field}.headers_to_add[${i}].header.value`, 'command operators (%...%) are not supported');
  });
  const unapplied = unappliedFields(TcpProxy_TunnelingConfigSchema, tc, UNAPPLIED);
  if (unapplied.length > 0) log.warn(`tcp_proxy tunneling_config ${JSON.stringify(tc.hostname)}: accepted but not applied yet: ${unapplied.join(', ')}`);
  return { hostname: tc.hostname, usePost: tc.usePost, postPath: tc.postPath || '/', headers: compileMutation(tc.headersToAdd, [], `${field}.headers_to_add`) };
}

type TunnelHeaders = Record<string, string | string[]>;

/** The request's headers: Envoy's base ones (`base`), then headers_to_add. */
function tunnelHeaders(spec: TunnelSpec, base: TunnelHeaders): TunnelHeaders {
  applyMutations(new HeaderRecord(base), [spec.headers]);
  return base;
}

/** HTTP/2: a CONNECT (or POST) stream on the cluster's sessions; :scheme (POST only) follows the transport. */
function http2Tunnel(spec: TunnelSpec, cluster: UpstreamCluster, ep: Endpoint, o: UpstreamOptions, sessions: NonNullable<UpstreamCluster['http2']>): ClientHttp2Stream {
  const secure = cluster.transportOf?.(ep)?.tls !== undefined;
  const base: TunnelHeaders = spec.usePost
    ? { ':method': 'POST', ':authority': spec.hostname, ':path': spec.postPath, ':scheme': secure ? 'https' : 'http' }
    : { ':method': 'CONNECT', ':authority': spec.hostname };
  const stream = sessions.request(ep, o, tunnelHeaders(spec, base), { endStream: false });
  stream.once('response', (headers) => {
    const status = Number(headers[':status']);
    if (status === 200) stream.emit(TUNNEL_READY);
    else stream.destroy(new Error(`the tunnel's proxy answered ${status}`));
  });
  return stream;
}

/** The tunnel to `ep`; it emits TUNNEL_READY once established, then carries the downstream bytes both ways. */
export function openTunnel(spec: TunnelSpec, cluster: UpstreamCluster, ep: Endpoint, o: UpstreamOptions): Duplex {
  // Envoy's choice: the cluster's HTTP/2 when its protocol options are HTTP/2 (a tunnel has no downstream HTTP to follow).
  const sessions = http2For(cluster, false);
  if (sessions) return http2Tunnel(spec, cluster, ep, o, sessions);
  // As Envoy's HTTP/1 codec writes them: CONNECT's target is the authority; a POST's body is chunked.
  const headers = tunnelHeaders(spec, { host: spec.hostname });
  const head = spec.usePost ? requestHead('POST', spec.postPath, { ...headers, 'transfer-encoding': 'chunked' }) : requestHead('CONNECT', spec.hostname, headers);
  return http1Tunnel(head, spec.usePost, cluster.tcp.connect(ep, o), TUNNEL_READY);
}
