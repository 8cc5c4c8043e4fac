// A DestinationRule's `tunnel` (its trafficPolicy's and each subset's; the port-level settings have
// none), as the Go mesh's validateTunnelSettings: protocol CONNECT or POST, a target host that is a
// DNS name or an IP address, a target port in range; and never together with proxyProtocol.
import { isIP } from 'node:net';
import { checkHost } from './syntax.js';
import { forEachRulePolicy } from './traffic-policies.js';
import { asRecord, type Fields } from './values.js';

const PROTOCOLS = ['CONNECT', 'POST'];

function hostProblem(host: unknown): string | undefined {
  if (host === undefined || host === '') return 'required: the host the tunnel\'s proxy connects to';
  if (typeof host !== 'string') return `must be a string, got ${JSON.stringify(host)}`;
  if (isIP(host) !== 0 || (!host.startsWith('*') && checkHost(host) === undefined)) return undefined;
  return `invalid host ${JSON.stringify(host)}; expected a DNS name or an IP address`;
}

function portProblem(port: unknown): string | undefined {
  if (typeof port === 'number' && Number.isInteger(port) && port >= 1 && port <= 65535) return undefined;
  return port === undefined ? 'required: a port in 1..65535' : `must be a port in 1..65535, got ${JSON.stringify(port)}`;
}

export function destinationRuleTunnel(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  forEachRulePolicy(spec, path, (policy, at) => {
    if (policy['tunnel'] === undefined) return;
    const tunnel = asRecord(policy['tunnel']);
    if (!tunnel) return add(`${at}.tunnel`, 'must be an object with targetHost and targetPort');
    const protocol = tunnel['protocol'];
    if (protocol !== undefined && protocol !== '' && !PROTOCOLS.includes(protocol as string)) add(`${at}.tunnel.protocol`, `${JSON.stringify(protocol)} is not a tunnel protocol; expected ${PROTOCOLS.join(' or ')}`);
    const host = hostProblem(tunnel['targetHost']);
    if (host) add(`${at}.tunnel.targetHost`, host);
    const port = portProblem(tunnel['targetPort']);
    if (port) add(`${at}.tunnel.targetPort`, port);
    if (policy['proxyProtocol'] !== undefined) add(`${at}.tunnel`, 'cannot be set together with proxyProtocol');
  });
}
