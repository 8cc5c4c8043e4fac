// Golden files of `pilot-agent mesh-iptables --dry-run -f`: for each flag combination the Go
// mesh's capture tests cover (its tools/istio-iptables/pkg/capture/testdata), the restore input we
// print is compared with test/iptables/testdata/<case>.golden. The goldens are ours, reviewed
// against the Go mesh's goldens for the same inputs (chains renamed ISTIO_* -> MESH_*).
// Regenerate after an intended change: REFRESH_GOLDEN=1 node --test dist/test/iptables/golden.test.js
// and review the diff.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { captureText } from '../../src/iptables/apply.js';
import { captureConfig, type PodFacts } from '../../src/iptables/config.js';
import { REPO_ROOT } from '../helpers/proc.js';
import { flagsOf } from './flags.js';

const TESTDATA = join(REPO_ROOT, 'test', 'iptables', 'testdata');

interface Case {
  readonly name: string;
  readonly args: Record<string, string>;
  readonly ipv6?: boolean;
  readonly dns?: string[];
  readonly defaultUid?: string;
}

// The Go mesh's test configuration sets uid and gid 1337 unless a case says otherwise.
const OWNERS = { 'proxy-uid': '1337', 'proxy-gid': '1337' };
const UIDS_3_4 = { 'proxy-uid': '3,4', 'proxy-gid': '1,2' };

/**
 * The Go mesh's cases (same names), minus those whose inputs have no flag here: owner-group
 * filters (outbound-owner-groups*), excluded NICs (basic-exclude-nic; tproxy's exclude NIC is left
 * out), drop-invalid and host-ipv4-loopback-cidr. Then cases of ours for flags its tests leave out.
 */
const CASES: Case[] = [
  { name: 'ipv6-empty-inbound-ports', args: { ...OWNERS, 'mesh-inbound-ports': '' }, ipv6: true },
  { name: 'ip-range', args: { ...UIDS_3_4, 'mesh-service-exclude-cidr': '1.1.0.0/16', 'mesh-service-cidr': '9.9.0.0/16', 'redirect-dns': 'true' }, dns: ['127.0.0.53'] },
  {
    name: 'tproxy',
    args: { ...OWNERS, 'mesh-inbound-interception-mode': 'TPROXY', 'mesh-inbound-ports': '*', 'mesh-service-exclude-cidr': '1.1.0.0/16', 'mesh-service-cidr': '9.9.0.0/16', 'redirect-dns': 'true' },
    dns: ['127.0.0.53'],
    ipv6: true,
  },
  { name: 'ipv6-inbound-ports', args: { ...OWNERS, 'mesh-inbound-ports': '4000,5000' }, ipv6: true },
  { name: 'ipv6-virt-interfaces', args: { ...OWNERS, 'mesh-inbound-ports': '4000,5000', 'orch-virt-interfaces': 'eth0,eth1' }, ipv6: true },
  {
    name: 'ipv6-ipnets',
    args: { ...OWNERS, 'mesh-inbound-ports': '4000,5000', 'mesh-local-exclude-ports': '6000,7000,', 'orch-virt-interfaces': 'eth0,eth1', 'mesh-service-exclude-cidr': '2001:db8::/32', 'mesh-service-cidr': '2001:db8::/32' },
    ipv6: true,
  },
  {
    name: 'ipv6-uid-gid',
    args: { ...UIDS_3_4, 'mesh-inbound-ports': '4000,5000', 'mesh-local-exclude-ports': '6000,7000', 'orch-virt-interfaces': 'eth0,eth1', 'mesh-service-exclude-cidr': '2001:db8::/32', 'mesh-service-cidr': '2001:db8::/32' },
    ipv6: true,
  },
  { name: 'ipv6-outbound-ports', args: { ...OWNERS, 'mesh-inbound-ports': '', 'mesh-outbound-ports': '32000,31000' }, ipv6: true },
  { name: 'empty', args: OWNERS },
  { name: 'kube-virt-interfaces', args: { ...OWNERS, 'orch-virt-interfaces': 'eth1,eth2', 'mesh-service-cidr': '*' } },
  { name: 'ipnets', args: { ...OWNERS, 'mesh-service-cidr': '10.0.0.0/8' } },
  { name: 'ipnets-with-kube-virt-interfaces', args: { ...OWNERS, 'orch-virt-interfaces': 'eth1,eth2', 'mesh-service-cidr': '10.0.0.0/8' } },
  { name: 'inbound-ports-include', args: { ...OWNERS, 'mesh-inbound-ports': '32000,31000' } },
  { name: 'inbound-ports-wildcard', args: { ...OWNERS, 'mesh-inbound-ports': '*' } },
  { name: 'inbound-ports-tproxy', args: { ...OWNERS, 'mesh-inbound-ports': '32000,31000', 'mesh-inbound-interception-mode': 'TPROXY' } },
  { name: 'inbound-ports-wildcard-tproxy', args: { ...OWNERS, 'mesh-inbound-ports': '*', 'mesh-inbound-interception-mode': 'TPROXY' } },
  { name: 'dns-uid-gid', args: { ...UIDS_3_4, 'redirect-dns': 'true' }, dns: ['127.0.0.53', '::127.0.0.53'], ipv6: true },
  // Name servers neither here nor captured-all: DNS capture is off, as in the Go mesh.
  { name: 'ipv6-dns-uid-gid', args: { ...UIDS_3_4, 'redirect-dns': 'true' }, ipv6: true },
  { name: 'outbound-ports-include', args: { ...OWNERS, 'mesh-outbound-ports': '32000,31000' } },
  { name: 'loopback-outbound-iprange', args: { ...UIDS_3_4, 'mesh-service-cidr': '127.1.2.3/32', 'redirect-dns': 'true' }, dns: ['127.0.0.53'] },
  // Ours: flags the Go mesh's capture tests do not exercise.
  { name: 'outbound-ports-exclude', args: { ...OWNERS, 'mesh-service-cidr': '*', 'mesh-local-outbound-ports-exclude': '25,3306' } },
  { name: 'inbound-wildcard-exclude', args: { ...OWNERS, 'mesh-inbound-ports': '*', 'mesh-local-exclude-ports': '15020,15021' } },
  {
    name: 'tproxy-custom-ports-mark-table',
    args: { ...OWNERS, 'mesh-inbound-interception-mode': 'TPROXY', 'mesh-inbound-ports': '*', 'dataplane-port': '16001', 'inbound-capture-port': '16006', 'inbound-tunnel-port': '16008', 'mesh-inbound-tproxy-mark': '7', 'mesh-inbound-tproxy-route-table': '70' },
  },
  { name: 'proxy-user-default', args: { 'mesh-service-cidr': '*', 'mesh-inbound-ports': '*' }, defaultUid: '65534' },
];

function facts(c: Case): PodFacts {
  return { ipv6: c.ipv6 ?? false, dnsServers: c.dns ?? [], defaultProxyUid: c.defaultUid ?? '1337' };
}

function header(c: Case): string {
  const args = Object.entries(c.args).map(([k, v]) => `--${k}=${v}`).join(' ');
  return `# mesh-iptables --dry-run -f ${args}\n# pod: ${c.ipv6 ? 'IPv6' : 'IPv4 only'}; name servers: ${(c.dns ?? []).join(' ') || 'none'}; PROXY_USER uid: ${c.defaultUid ?? '1337'}\n`;
}

for (const c of CASES) {
  test(`mesh-iptables --dry-run -f golden: ${c.name}`, () => {
    const got = header(c) + captureText(captureConfig(flagsOf(c.args), facts(c)), true);
    const file = join(TESTDATA, `${c.name}.golden`);
    if (process.env.REFRESH_GOLDEN === '1') {
      mkdirSync(TESTDATA, { recursive: true });
      writeFileSync(file, got);
    }
    assert.equal(got, readFileSync(file, 'utf8'), `${file} differs (REFRESH_GOLDEN=1 rewrites it; review the diff)`);
  });
}
