// The rbac network filter (envoy.filters.network.rbac): the HTTP rbac filter's evaluator
// (envoy/rbac.ts) over a connection instead of a request, as a gate before the chain's terminal
// filter. It sees the addresses, the SNI and the verified peer certificate; HTTP-only matchers
// (header, url_path, uri_template) never match. A denied connection is closed before anything is
// read from it or an upstream is opened.
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { scope } from '../../common/log.js';
import { RBACSchema, RBAC_EnforcementType } from '../../gen/envoy/extensions/filters/network/rbac/v3/rbac_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { normalizeIp } from '../../envoy/matchers.js';
import { NETWORK_RBAC_FILTER_NAME } from '../../envoy/names.js';
import { compileRbacRules } from '../../envoy/rbac.js';
import { connectionView, type RequestView } from '../../envoy/request.js';
import { connectionDestination } from '../original-dst.js';
import type { StatSample } from '../stats.js';
import { peerIdentityOf } from '../tls/peer.js';
import { registerConnectionGate } from './network-filters.js';

const log = scope('rbac');

/** What the filter evaluates for a connection (the socket is the TLS one on a TLS chain). */
export function connectionViewOf(socket: Socket): RequestView {
  const sni = (socket as Partial<TLSSocket>).encrypted === true ? (socket as TLSSocket).servername || '' : '';
  const peer = peerIdentityOf(socket);
  return connectionView({
    source: { address: normalizeIp(socket.remoteAddress ?? ''), port: socket.remotePort ?? 0 },
    destination: connectionDestination(socket),
    requestedServerName: sni,
    ...(peer ? { peer } : {}),
  });
}

registerConnectionGate({
  schema: RBACSchema,
  build(config) {
    if (config.matcher || config.shadowMatcher) throw new ConfigError('matcher', 'the matcher API is not supported; use rules/shadow_rules');
    // Every attribute the rules can see is fixed once the connection is established, so deciding
    // once gives the decision CONTINUOUS would repeat on each read.
    if (config.enforcementType === RBAC_EnforcementType.CONTINUOUS) {
      log.warn(`rbac network filter ${JSON.stringify(config.statPrefix)}: enforcement_type CONTINUOUS is evaluated once per connection (no protocol filter here writes per-message metadata)`);
    }
    const compiled = compileRbacRules(config);
    const prefix = `${config.statPrefix}rbac.`;
    return {
      admit(socket) {
        const r = compiled.decide(connectionViewOf(socket), NETWORK_RBAC_FILTER_NAME);
        if (r.allowed) return undefined;
        const details = `rbac_access_denied_matched_policy[${r.matchedPolicy ?? 'none'}]`;
        log.debug(`connection from ${socket.remoteAddress}:${socket.remotePort} closed: ${details}`);
        return details;
      },
      samples(): StatSample[] {
        return Object.entries(compiled.stats).map(([stat, value]) => {
          const name = `${prefix}${stat}`;
          return { name, prom: `envoy_${name}`.replace(/[^a-zA-Z0-9_:]/g, '_'), labels: {}, kind: 'counter' as const, value };
        });
      },
    };
  },
});
