// The capture rules of a sidecar: the same chains, rules and order as the Go mesh's istio-iptables
// builds for the same inputs (its ISTIO_* chains are our MESH_*), so that operators read the same
// iptables-save. Pure: a CaptureConfig in, the rules and the policy-routing commands out.
//
// nat PREROUTING -> MESH_INBOUND -> MESH_IN_REDIRECT (REDIRECT to the inbound capture port), or in
// TPROXY mode mangle PREROUTING -> MESH_INBOUND -> MESH_TPROXY / MESH_DIVERT (mark, route to lo).
// nat OUTPUT -> MESH_OUTPUT -> MESH_REDIRECT (REDIRECT to the dataplane port), with the proxy's own
// traffic, loopback and excluded ports/CIDRs returning first; DNS -> MESH_OUTPUT_DNS (nat, raw).
import { DNS_PROXY_PORT, OUTBOUND_MARK, type CaptureConfig, type NetworkRange } from './config.js';
import { FAMILY_ADDRESS, RuleSet, type Family } from './rules.js';

export const MESH_INBOUND = 'MESH_INBOUND';
export const MESH_REDIRECT = 'MESH_REDIRECT';
export const MESH_IN_REDIRECT = 'MESH_IN_REDIRECT';
export const MESH_OUTPUT = 'MESH_OUTPUT';
export const MESH_OUTPUT_DNS = 'MESH_OUTPUT_DNS';
export const MESH_DIVERT = 'MESH_DIVERT';
export const MESH_TPROXY = 'MESH_TPROXY';

/** The host's loopback address per family, and the address inbound passthrough connects from. */
const LOOPBACK = { 4: '127.0.0.1/32', 6: '::1/128' } as const;
export const PASSTHROUGH_SOURCE = { 4: '127.0.0.6/32', 6: '::6/128' } as const;

export interface CapturePlan {
  readonly rules: RuleSet;
  /** `ip` commands (argv after `ip`) for TPROXY's policy routing and IPv6's ::6 address. */
  readonly routes: readonly (readonly string[])[];
}

export function buildCapture(cfg: CaptureConfig): CapturePlan {
  const rb = new RuleSet(cfg.ipv6);
  // A VM's virtual interfaces: their inbound traffic is the VM's outbound, never inbound capture.
  for (const i of cfg.virtualInterfaces) rb.insert('nat', 'PREROUTING', 1, '-i', i, '-j', 'RETURN');
  // The tunnel port is served by the proxy itself and never redirected.
  rb.append('nat', MESH_INBOUND, '-p', 'tcp', '--dport', cfg.inboundTunnelPort, '-j', 'RETURN');
  rb.append('nat', MESH_REDIRECT, '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', cfg.proxyPort);
  rb.append('nat', MESH_IN_REDIRECT, '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', cfg.inboundCapturePort);
  inbound(rb, cfg);
  outbound(rb, cfg);
  if (cfg.mode === 'TPROXY') tproxyMarks(rb, cfg);
  return { rules: rb, routes: routes(cfg) };
}

function inbound(rb: RuleSet, cfg: CaptureConfig): void {
  if (cfg.inboundPorts !== '*' && cfg.inboundPorts.length === 0) return;
  const tproxy = cfg.mode === 'TPROXY';
  const table = tproxy ? 'mangle' : 'nat';
  if (tproxy) {
    // Packets of connections the proxy already owns are marked and routed to lo (MESH_DIVERT);
    // new ones go to the capture port with TPROXY, keeping their destination address.
    rb.append('mangle', MESH_DIVERT, '-j', 'MARK', '--set-mark', cfg.tproxyMark);
    rb.append('mangle', MESH_DIVERT, '-j', 'ACCEPT');
    rb.appendVersioned(LOOPBACK[4], LOOPBACK[6], 'mangle', MESH_TPROXY, '!', '-d', FAMILY_ADDRESS, '-p', 'tcp', '-j', 'TPROXY',
      '--tproxy-mark', `${cfg.tproxyMark}/0xffffffff`, '--on-port', cfg.inboundCapturePort);
  }
  rb.append(table, 'PREROUTING', '-p', 'tcp', '-j', MESH_INBOUND);
  const capture = (...match: string[]) => {
    if (tproxy) {
      rb.append('mangle', MESH_INBOUND, '-p', 'tcp', ...match, '-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', MESH_DIVERT);
      rb.append('mangle', MESH_INBOUND, '-p', 'tcp', ...match, '-j', MESH_TPROXY);
    } else {
      rb.append('nat', MESH_INBOUND, '-p', 'tcp', ...match, '-j', MESH_IN_REDIRECT);
    }
  };
  if (cfg.inboundPorts === '*') {
    for (const p of cfg.inboundPortsExclude) rb.append(table, MESH_INBOUND, '-p', 'tcp', '--dport', p, '-j', 'RETURN');
    capture();
  } else {
    for (const p of cfg.inboundPorts) capture('--dport', p);
  }
}

function outbound(rb: RuleSet, cfg: CaptureConfig): void {
  rb.append('nat', 'OUTPUT', '-j', MESH_OUTPUT);
  // Port exclusions come before anything that could send the connection back to the proxy.
  for (const p of cfg.outboundPortsExclude) {
    rb.append('nat', MESH_OUTPUT, '-p', 'tcp', '--dport', p, '-j', 'RETURN');
    rb.append('nat', MESH_OUTPUT, '-p', 'udp', '--dport', p, '-j', 'RETURN');
  }
  // The inbound passthrough cluster connects to the app from 127.0.0.6 / ::6.
  rb.appendVersioned(PASSTHROUGH_SOURCE[4], PASSTHROUGH_SOURCE[6], 'nat', MESH_OUTPUT, '-o', 'lo', '-s', FAMILY_ADDRESS, '-j', 'RETURN');
  // TPROXY: the proxy connects to the app at the pod's own address from the client's (original_src,
  // marked). The proxy-user rule below would send that connection to inbound capture again, a loop.
  if (cfg.mode === 'TPROXY') rb.append('nat', MESH_OUTPUT, '-o', 'lo', '-p', 'tcp', '-m', 'mark', '--mark', cfg.tproxyMark, '-j', 'RETURN');
  const loopbackCaptured = cfg.outboundInclude.v4.hasLoopback || cfg.outboundInclude.v6.hasLoopback;
  const owner = (kind: 'uid' | 'gid', id: string) => {
    // The proxy calling its own pod's address over lo (app -> proxy -> VIP -> this pod) goes
    // through inbound capture; with DNS capture, port 53 stays with the agent's DNS proxy.
    const notPorts = cfg.redirectDns && kind === 'uid'
      ? ['-m', 'multiport', '!', '--dports', `53,${cfg.inboundTunnelPort}`]
      : ['!', '--dport', cfg.inboundTunnelPort];
    rb.appendVersioned(LOOPBACK[4], LOOPBACK[6], 'nat', MESH_OUTPUT, '-o', 'lo', '!', '-d', FAMILY_ADDRESS, '-p', 'tcp', ...notPorts,
      '-m', 'owner', `--${kind}-owner`, id, '-j', MESH_IN_REDIRECT);
    // The app calling itself over lo is left alone, unless a loopback range is captured on purpose.
    if (!loopbackCaptured) {
      const tcpNot53 = cfg.redirectDns ? ['-p', 'tcp', '!', '--dport', '53'] : [];
      rb.append('nat', MESH_OUTPUT, '-o', 'lo', ...tcpNot53, '-m', 'owner', '!', `--${kind}-owner`, id, '-j', 'RETURN');
    }
    // Everything else the proxy (or agent) sends leaves as is: no loops, whatever the protocol.
    rb.append('nat', MESH_OUTPUT, '-m', 'owner', `--${kind}-owner`, id, '-j', 'RETURN');
  };
  for (const uid of cfg.proxyUids) owner('uid', uid);
  for (const gid of cfg.proxyGids) owner('gid', gid);
  if (cfg.redirectDns) dns(rb, cfg);
  rb.appendVersioned(LOOPBACK[4], LOOPBACK[6], 'nat', MESH_OUTPUT, '-d', FAMILY_ADDRESS, '-j', 'RETURN');
  // Exclusions before inclusions.
  for (const c of cfg.outboundExclude.v4.cidrs) rb.appendFor(4, 'nat', MESH_OUTPUT, '-d', c, '-j', 'RETURN');
  for (const c of cfg.outboundExclude.v6.cidrs) rb.appendFor(6, 'nat', MESH_OUTPUT, '-d', c, '-j', 'RETURN');
  for (const p of cfg.outboundPortsInclude) rb.append('nat', MESH_OUTPUT, '-p', 'tcp', '--dport', p, '-j', MESH_REDIRECT);
  outboundInclude(rb, cfg, 4, cfg.outboundInclude.v4);
  outboundInclude(rb, cfg, 6, cfg.outboundInclude.v6);
}

function outboundInclude(rb: RuleSet, cfg: CaptureConfig, family: Family, range: NetworkRange): void {
  if (range.wildcard) {
    rb.appendFor(family, 'nat', MESH_OUTPUT, '-j', MESH_REDIRECT);
    for (const i of cfg.virtualInterfaces) rb.insertFor(family, 'nat', 'PREROUTING', 1, '-i', i, '-j', MESH_REDIRECT);
    return;
  }
  for (const c of range.cidrs) {
    for (const i of cfg.virtualInterfaces) rb.insertFor(family, 'nat', 'PREROUTING', 1, '-i', i, '-d', c, '-j', MESH_REDIRECT);
    rb.appendFor(family, 'nat', MESH_OUTPUT, '-d', c, '-j', MESH_REDIRECT);
  }
}

/** DNS to the pod's name servers goes to the agent's DNS proxy; the agent's own queries do not. */
function dns(rb: RuleSet, cfg: CaptureConfig): void {
  const servers = { 4: cfg.dnsServersV4, 6: cfg.dnsServersV6 } as const;
  const bits = { 4: '/32', 6: '/128' } as const;
  rb.append('raw', 'OUTPUT', '-j', MESH_OUTPUT_DNS);
  for (const f of [4, 6] as const) if (servers[f].length > 0) rb.appendFor(f, 'nat', MESH_OUTPUT, '-j', MESH_OUTPUT_DNS);
  for (const f of [4, 6] as const) {
    for (const s of servers[f]) rb.appendFor(f, 'nat', MESH_OUTPUT_DNS, '-p', 'tcp', '--dport', '53', '-d', s + bits[f], '-j', 'REDIRECT', '--to-ports', DNS_PROXY_PORT);
  }
  for (const f of [4, 6] as const) {
    for (const s of servers[f]) rb.appendFor(f, 'nat', MESH_OUTPUT_DNS, '-p', 'udp', '--dport', '53', '-d', s + bits[f], '-j', 'REDIRECT', '--to-port', DNS_PROXY_PORT);
  }
  // Separate conntrack zones for agent <-> upstream and app <-> agent UDP, so that the two legs of
  // one query are not taken for the same flow.
  const zones = (kind: 'uid' | 'gid', id: string) => {
    rb.append('raw', MESH_OUTPUT_DNS, '-p', 'udp', '--dport', '53', '-m', 'owner', `--${kind}-owner`, id, '-j', 'CT', '--zone', '1');
    rb.append('raw', MESH_OUTPUT_DNS, '-p', 'udp', '--sport', DNS_PROXY_PORT, '-m', 'owner', `--${kind}-owner`, id, '-j', 'CT', '--zone', '2');
  };
  for (const uid of cfg.proxyUids) zones('uid', uid);
  for (const gid of cfg.proxyGids) zones('gid', gid);
  for (const f of [4, 6] as const) {
    if (servers[f].length > 0) rb.appendFor(f, 'raw', 'PREROUTING', '-j', MESH_INBOUND);
    for (const s of servers[f]) {
      rb.appendFor(f, 'raw', MESH_OUTPUT_DNS, '-p', 'udp', '--dport', '53', '-d', s + bits[f], '-j', 'CT', '--zone', '2');
      rb.appendFor(f, 'raw', MESH_INBOUND, '-p', 'udp', '--sport', '53', '-s', s + bits[f], '-j', 'CT', '--zone', '1');
    }
  }
}

/** TPROXY: connection marks so replies of captured connections find their way back to the proxy. */
function tproxyMarks(rb: RuleSet, cfg: CaptureConfig): void {
  const mark = cfg.tproxyMark;
  rb.append('mangle', 'PREROUTING', '-p', 'tcp', '-m', 'mark', '--mark', mark, '-j', 'CONNMARK', '--save-mark');
  rb.append('mangle', 'OUTPUT', '-p', 'tcp', '-o', 'lo', '-m', 'mark', '--mark', mark, '-j', 'RETURN');
  for (const [kind, ids] of [['uid', cfg.proxyUids], ['gid', cfg.proxyGids]] as const) {
    for (const id of ids) {
      rb.appendVersioned(LOOPBACK[4], LOOPBACK[6], 'mangle', 'OUTPUT', '!', '-d', FAMILY_ADDRESS, '-p', 'tcp', '-o', 'lo',
        '-m', 'owner', `--${kind}-owner`, id, '-j', 'MARK', '--set-mark', OUTBOUND_MARK);
    }
  }
  rb.append('mangle', 'OUTPUT', '-p', 'tcp', '-m', 'connmark', '--mark', mark, '-j', 'CONNMARK', '--restore-mark');
  rb.insert('mangle', MESH_INBOUND, 1, '-p', 'tcp', '-m', 'mark', '--mark', mark, '-j', 'RETURN');
  rb.insertFor(4, 'mangle', MESH_INBOUND, 2, '-p', 'tcp', '-s', PASSTHROUGH_SOURCE[4], '-i', 'lo', '-j', 'RETURN');
  rb.insertFor(6, 'mangle', MESH_INBOUND, 2, '-p', 'tcp', '-s', PASSTHROUGH_SOURCE[6], '-i', 'lo', '-j', 'RETURN');
  rb.insert('mangle', MESH_INBOUND, 3, '-p', 'tcp', '-i', 'lo', '-m', 'mark', '!', '--mark', OUTBOUND_MARK, '-j', 'RETURN');
}

/** Policy routing for TPROXY (marked packets are local, delivered on lo) and IPv6's ::6 source. */
function routes(cfg: CaptureConfig): string[][] {
  const out: string[][] = [];
  if (cfg.ipv6) out.push(['-6', 'addr', 'add', PASSTHROUGH_SOURCE[6], 'dev', 'lo']);
  if (cfg.mode !== 'TPROXY' || (cfg.inboundPorts !== '*' && cfg.inboundPorts.length === 0)) return out;
  const families = cfg.ipv6 ? (['-4', '-6'] as const) : (['-4'] as const);
  for (const f of families) out.push([f, 'rule', 'add', 'fwmark', cfg.tproxyMark, 'lookup', cfg.tproxyRouteTable]);
  for (const f of families) out.push([f, 'route', 'add', 'local', f === '-4' ? '0.0.0.0/0' : '::/0', 'dev', 'lo', 'table', cfg.tproxyRouteTable]);
  return out;
}
