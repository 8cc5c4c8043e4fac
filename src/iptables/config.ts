// What mesh-iptables is asked to do: its flags, checked and normalised, plus the facts of the pod
// it runs in (IPv6 addresses, DNS servers, the proxy user) that the caller looks up. Pure: the
// rule builder (capture.ts) takes a CaptureConfig and nothing else.
import { isIP } from 'node:net';
import { UsageError } from '../cli/command.js';

export type InterceptionMode = 'REDIRECT' | 'TPROXY';

export interface NetworkRange {
  readonly wildcard: boolean;
  readonly cidrs: readonly string[];
  /** A loopback range is listed: the app's own loopback traffic is then captured too. */
  readonly hasLoopback: boolean;
}

export interface CaptureConfig {
  readonly proxyPort: string;
  readonly inboundCapturePort: string;
  readonly inboundTunnelPort: string;
  readonly proxyUids: readonly string[];
  readonly proxyGids: readonly string[];
  readonly mode: InterceptionMode;
  readonly tproxyMark: string;
  readonly tproxyRouteTable: string;
  /** '*' for every port; an empty list captures no inbound traffic. */
  readonly inboundPorts: '*' | readonly string[];
  readonly inboundPortsExclude: readonly string[];
  readonly outboundPortsInclude: readonly string[];
  readonly outboundPortsExclude: readonly string[];
  readonly outboundInclude: Record<'v4' | 'v6', NetworkRange>;
  readonly outboundExclude: Record<'v4' | 'v6', NetworkRange>;
  readonly virtualInterfaces: readonly string[];
  readonly dnsServersV4: readonly string[];
  readonly dnsServersV6: readonly string[];
  /** DNS capture is on and has servers to capture (see `captureConfig`). */
  readonly redirectDns: boolean;
  readonly ipv6: boolean;
  /** The addresses the validation probe uses (iptables-probe-port, probe-timeout). */
  readonly probePort: number;
  readonly probeTimeoutMs: number;
}

/** Facts about the pod, looked up by the caller (system.ts) so that building stays pure. */
export interface PodFacts {
  /** The pod has a non-loopback, non-link-local IPv6 address. */
  readonly ipv6: boolean;
  /** Name servers of /etc/resolv.conf. */
  readonly dnsServers: readonly string[];
  /** The proxy user's UID when `--proxy-uid` is empty (PROXY_USER, else 1337). */
  readonly defaultProxyUid: string;
}

/** The subset of parsed flags the config reads (the CLI's FlagValues). */
export interface FlagReader {
  string(name: string): string;
  bool(name: string): boolean;
  duration(name: string): bigint;
  readonly explicit: ReadonlySet<string>;
}

/** The Go mesh's values for the TPROXY mark and route table when the flags are empty. */
export const DEFAULT_TPROXY_MARK = '1337';
export const DEFAULT_TPROXY_ROUTE_TABLE = '133';
/** The mark the proxy's own loopback connections to the app carry in TPROXY mode. */
export const OUTBOUND_MARK = '1338';
/** The agent's DNS proxy. */
export const DNS_PROXY_PORT = '15053';

const LABELS: Record<string, string> = {
  'dataplane-port': '-p, --dataplane-port',
  'inbound-capture-port': '-z, --inbound-capture-port',
  'inbound-tunnel-port': '-e, --inbound-tunnel-port',
  'iptables-probe-port': '--iptables-probe-port',
  'mesh-inbound-interception-mode': '-m, --mesh-inbound-interception-mode',
  'mesh-inbound-ports': '-b, --mesh-inbound-ports',
  'mesh-inbound-tproxy-mark': '-t, --mesh-inbound-tproxy-mark',
  'mesh-inbound-tproxy-route-table': '-r, --mesh-inbound-tproxy-route-table',
  'mesh-local-exclude-ports': '-d, --mesh-local-exclude-ports',
  'mesh-local-outbound-ports-exclude': '-o, --mesh-local-outbound-ports-exclude',
  'mesh-outbound-ports': '-q, --mesh-outbound-ports',
  'mesh-service-cidr': '-i, --mesh-service-cidr',
  'mesh-service-exclude-cidr': '-x, --mesh-service-exclude-cidr',
  'orch-virt-interfaces': '-k, --orch-virt-interfaces',
  'proxy-uid': '-u, --proxy-uid',
  'proxy-gid': '-g, --proxy-gid',
};

function bad(flag: string, value: string, expected: string): UsageError {
  return new UsageError(`invalid argument "${value}" for "${LABELS[flag] ?? `--${flag}`}" flag: expected ${expected}`);
}

/** Comma-separated values without empty items (`6000,7000,` is two ports), as the Go mesh splits. */
export function splitList(raw: string): string[] {
  return raw.split(',').map((s) => s.trim()).filter((s) => s !== '');
}

const PORT = /^\d{1,5}$/;

function isPort(s: string): boolean {
  return PORT.test(s) && Number(s) <= 65535;
}

function port(flags: FlagReader, name: string): string {
  const v = flags.string(name).trim();
  if (!isPort(v)) throw bad(name, v, 'a port number from 0 to 65535');
  return v;
}

/** A port list for `--dport`: ports or `low:high` ranges. */
function ports(flags: FlagReader, name: string): string[] {
  const raw = flags.string(name);
  const list = splitList(raw);
  for (const p of list) {
    const [lo, hi, ...rest] = p.split(':');
    if (rest.length > 0 || !isPort(lo!) || (hi !== undefined && !isPort(hi))) throw bad(name, raw, `comma-separated ports (0-65535 or low:high), "${p}" is not one`);
  }
  return list;
}

function integer(flags: FlagReader, name: string, fallback: string): string {
  const v = flags.string(name).trim() || fallback;
  if (!/^\d+$/.test(v) || Number(v) > 0xffffffff) throw bad(name, v, 'a non-negative 32-bit integer');
  return v;
}

const IDENT = /^[A-Za-z0-9_.-]+$/;

function owners(flags: FlagReader, name: string, fallback: string): string[] {
  const raw = flags.string(name);
  const list = splitList(raw === '' ? fallback : raw);
  for (const u of list) if (!IDENT.test(u)) throw bad(name, raw, `comma-separated user or group ids, "${u}" is not one`);
  return list;
}

/** A CIDR list split by family; `*` is every address of both. */
export function networkRanges(raw: string, flag: string): Record<'v4' | 'v6', NetworkRange> {
  if (raw.trim() === '*') return { v4: { wildcard: true, cidrs: [], hasLoopback: false }, v6: { wildcard: true, cidrs: [], hasLoopback: false } };
  const v4: string[] = [];
  const v6: string[] = [];
  let loop4 = false;
  let loop6 = false;
  for (const item of splitList(raw)) {
    const m = /^([^/]+)\/(\d{1,3})$/.exec(item);
    const family = m ? isIP(m[1]!) : 0;
    if (!m || family === 0 || Number(m[2]) > (family === 4 ? 32 : 128)) throw bad(flag, raw, `comma-separated CIDRs such as 10.0.0.0/8 or fd00::/8, or *; "${item}" is not one`);
    if (family === 4) {
      v4.push(item);
      loop4 ||= m[1]!.startsWith('127.');
    } else {
      v6.push(item.toLowerCase());
      loop6 ||= m[1] === '::1';
    }
  }
  return { v4: { wildcard: false, cidrs: v4, hasLoopback: loop4 }, v6: { wildcard: false, cidrs: v6, hasLoopback: loop6 } };
}

function interfaces(flags: FlagReader): string[] {
  const raw = flags.string('orch-virt-interfaces');
  const list = splitList(raw);
  for (const i of list) if (!/^[^\s/]{1,15}$/.test(i)) throw bad('orch-virt-interfaces', raw, `comma-separated interface names, "${i}" is not one`);
  return list;
}

function mode(flags: FlagReader): InterceptionMode {
  const v = flags.string('mesh-inbound-interception-mode');
  if (v === '' || v === 'REDIRECT') return 'REDIRECT';
  if (v === 'TPROXY') return 'TPROXY';
  throw bad('mesh-inbound-interception-mode', v, 'REDIRECT or TPROXY');
}

/** The address family of each name server; others (unparseable lines) are left out. */
function splitServers(servers: readonly string[]): { v4: string[]; v6: string[] } {
  return { v4: servers.filter((s) => isIP(s) === 4), v6: servers.filter((s) => isIP(s) === 6) };
}

/** Checks and normalises mesh-iptables' flags; every error names its flag. */
export function captureConfig(flags: FlagReader, facts: PodFacts): CaptureConfig {
  const inbound = flags.string('mesh-inbound-ports').trim();
  const exclude = networkRanges(flags.string('mesh-service-exclude-cidr'), 'mesh-service-exclude-cidr');
  if (exclude.v4.wildcard) throw bad('mesh-service-exclude-cidr', '*', 'CIDRs; excluding every address (*) would capture nothing, use an empty --mesh-service-cidr instead');
  const uids = owners(flags, 'proxy-uid', facts.defaultProxyUid);
  const dns = splitServers(facts.dnsServers);
  const probePort = flags.string('iptables-probe-port').trim();
  if (!isPort(probePort)) throw bad('iptables-probe-port', probePort, 'a port number from 0 to 65535');
  return {
    proxyPort: port(flags, 'dataplane-port'),
    inboundCapturePort: port(flags, 'inbound-capture-port'),
    inboundTunnelPort: port(flags, 'inbound-tunnel-port'),
    proxyUids: uids,
    // The Go mesh's rule: an empty GID list is the UID list (the sidecar runs as uid = gid).
    proxyGids: owners(flags, 'proxy-gid', uids.join(',')),
    mode: mode(flags),
    tproxyMark: integer(flags, 'mesh-inbound-tproxy-mark', DEFAULT_TPROXY_MARK),
    tproxyRouteTable: integer(flags, 'mesh-inbound-tproxy-route-table', DEFAULT_TPROXY_ROUTE_TABLE),
    inboundPorts: inbound === '*' ? '*' : ports(flags, 'mesh-inbound-ports'),
    inboundPortsExclude: ports(flags, 'mesh-local-exclude-ports'),
    outboundPortsInclude: ports(flags, 'mesh-outbound-ports'),
    outboundPortsExclude: ports(flags, 'mesh-local-outbound-ports-exclude'),
    outboundInclude: networkRanges(flags.string('mesh-service-cidr'), 'mesh-service-cidr'),
    outboundExclude: exclude,
    virtualInterfaces: interfaces(flags),
    dnsServersV4: dns.v4,
    dnsServersV6: dns.v6,
    redirectDns: flags.bool('redirect-dns') && dns.v4.length + dns.v6.length > 0,
    ipv6: facts.ipv6,
    probePort: Number(probePort),
    probeTimeoutMs: Number(flags.duration('probe-timeout') / 1_000_000n),
  };
}
