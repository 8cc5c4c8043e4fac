// request_mirror_policies: a shadow copy of a request sent to another cluster, fire and forget.
// Its answer is read and dropped, its failure only logged: it never delays or fails the response.
import { request as httpRequest, type OutgoingHttpHeaders } from 'node:http';
import { scope } from '../common/log.js';
import type { StreamRequest } from '../envoy/request.js';
import type { ClusterManager } from './clusters.js';
import type { MirrorSpec } from './route-table.js';

const log = scope('router');

/** How long a shadow request may take before it is dropped (it holds a connection meanwhile). */
const SHADOW_TIMEOUT_MS = 30_000;

/** Envoy's shadow authority: `-shadow` appended to the host, before any port. */
export function shadowAuthority(authority: string): string {
  const m = /^(\[[^\]]*\]|[^:]*)(:\d+)?$/.exec(authority);
  return m ? `${m[1]}-shadow${m[2] ?? ''}` : `${authority}-shadow`;
}

/** Whether the request carries a body (the shadow copy is sent only for requests without one). */
function hasBody(req: StreamRequest): boolean {
  return req.headers.has('transfer-encoding') || (req.headers.has('content-length') && req.headers.joined('content-length') !== '0');
}

/** Sends a shadow copy to each mirror cluster whose fraction the request falls in. */
export function mirror(clusters: ClusterManager, mirrors: readonly MirrorSpec[], req: StreamRequest, path: string, headers: OutgoingHttpHeaders): void {
  if (hasBody(req)) {
    log.debug(`not mirroring ${req.method} ${path}: requests with a body are not mirrored yet`);
    return;
  }
  for (const m of mirrors) {
    if (m.fraction < 1 && Math.random() >= m.fraction) continue;
    const endpoint = clusters.get(m.cluster)?.pick(req);
    if (!endpoint) {
      log.debug(`mirror cluster ${m.cluster}: no cluster or healthy endpoint`);
      continue;
    }
    const shadow = httpRequest({
      host: endpoint.host,
      port: endpoint.port,
      method: req.method,
      path,
      headers: { ...headers, host: shadowAuthority(String(headers.host ?? req.authority)) },
      agent: false,
      timeout: SHADOW_TIMEOUT_MS,
    });
    shadow.on('response', (res) => res.resume());
    shadow.on('timeout', () => shadow.destroy());
    shadow.on('error', (e) => log.debug(`mirror to ${m.cluster} failed: ${e.message}`));
    shadow.end();
  }
}
