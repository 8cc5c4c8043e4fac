// pilot-agent mesh-iptables as a user runs it: what --dry-run prints (and that it is what would be
// applied), environment defaults, and flag errors that name the flag. Nothing here touches iptables.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { captureText } from '../../src/iptables/apply.js';
import { captureConfig } from '../../src/iptables/config.js';
import { podFacts } from '../../src/iptables/system.js';
import { run } from '../helpers/proc.js';
import { flagsOf } from './flags.js';

const OWNERS = ['-u', '1337', '-g', '1337'];

test('--dry-run -f prints the restore input the builder makes for this pod, and nothing else', async () => {
  const r = await run('pilot-agent', ['mesh-iptables', '--dry-run', '-f', ...OWNERS, '-b', '*', '-i', '*', '-m', 'TPROXY']);
  assert.equal(r.code, 0, r.stderr);
  const expected = captureText(captureConfig(flagsOf({ 'proxy-uid': '1337', 'proxy-gid': '1337', 'mesh-inbound-ports': '*', 'mesh-service-cidr': '*', 'mesh-inbound-interception-mode': 'TPROXY' }), podFacts()), true);
  assert.equal(r.stdout, expected);
  assert.match(r.stdout, /^# iptables-restore --noflush\n\*mangle\n-N MESH_DIVERT\n/);
  assert.match(r.stdout, /# then: ip -4 rule add fwmark 1337 lookup 133\n/);
});

test('--dry-run without -f prints the iptables commands in order', async () => {
  const r = await run('pilot-agent', ['mesh-iptables', '-n', ...OWNERS, '-b', '8000', '-i', '10.96.0.0/12']);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout.split('\n');
  assert.deepEqual(lines.slice(0, 4), ['iptables -t nat -N MESH_INBOUND', 'iptables -t nat -N MESH_REDIRECT', 'iptables -t nat -N MESH_IN_REDIRECT', 'iptables -t nat -N MESH_OUTPUT']);
  assert.ok(lines.indexOf('iptables -t nat -A MESH_INBOUND -p tcp --dport 8000 -j MESH_IN_REDIRECT') > lines.indexOf('iptables -t nat -A PREROUTING -p tcp -j MESH_INBOUND'));
  assert.equal(lines.filter((l) => l.endsWith('-d 10.96.0.0/12 -j MESH_REDIRECT')).length, 1);
});

test('ports and excludes default from DATAPLANE_PORT, INBOUND_CAPTURE_PORT, INBOUND_TUNNEL_PORT, MESH_LOCAL_EXCLUDE_PORTS, MESH_SERVICE_EXCLUDE_CIDR', async () => {
  const env = { DATAPLANE_PORT: '16001', INBOUND_CAPTURE_PORT: '16006', INBOUND_TUNNEL_PORT: '16008', MESH_LOCAL_EXCLUDE_PORTS: '22', MESH_SERVICE_EXCLUDE_CIDR: '192.168.0.0/16' };
  const r = await run('pilot-agent', ['mesh-iptables', '-n', '-f', ...OWNERS, '-b', '*', '-i', '*'], { env });
  assert.equal(r.code, 0, r.stderr);
  for (const rule of ['-A MESH_REDIRECT -p tcp -j REDIRECT --to-ports 16001', '-A MESH_IN_REDIRECT -p tcp -j REDIRECT --to-ports 16006', '-A MESH_INBOUND -p tcp --dport 16008 -j RETURN', '-A MESH_INBOUND -p tcp --dport 22 -j RETURN', '-A MESH_OUTPUT -d 192.168.0.0/16 -j RETURN']) {
    assert.ok(r.stdout.includes(`${rule}\n`), `missing ${rule} in:\n${r.stdout}`);
  }
  // A flag beats its variable.
  const flagged = await run('pilot-agent', ['mesh-iptables', '-n', '-f', ...OWNERS, '-p', '17001'], { env });
  assert.ok(flagged.stdout.includes('-A MESH_REDIRECT -p tcp -j REDIRECT --to-ports 17001\n'));
});

test('--redirect-dns defaults from MESH_META_DNS_CAPTURE (how the injector turns DNS capture on); the flag still wins', async (t) => {
  if (podFacts().dnsServers.length === 0) return t.skip('/etc/resolv.conf names no name server here, so DNS capture is off whatever the flag says');
  const dnsRule = '-A MESH_OUTPUT -j MESH_OUTPUT_DNS';
  const base = ['mesh-iptables', '-n', '-f', ...OWNERS, '-i', '*'];
  const off = await run('pilot-agent', base);
  assert.equal(off.code, 0, off.stderr);
  assert.ok(!off.stdout.includes('MESH_OUTPUT_DNS'), 'DNS captured with neither the flag nor the variable');
  const on = await run('pilot-agent', base, { env: { MESH_META_DNS_CAPTURE: 'true' } });
  assert.equal(on.code, 0, on.stderr);
  assert.ok(on.stdout.includes(`${dnsRule}\n`), `missing ${dnsRule} in:\n${on.stdout}`);
  const flagged = await run('pilot-agent', [...base, '--redirect-dns=false'], { env: { MESH_META_DNS_CAPTURE: 'true' } });
  assert.ok(!flagged.stdout.includes('MESH_OUTPUT_DNS'), '--redirect-dns=false did not beat MESH_META_DNS_CAPTURE=true');
  const help = await run('pilot-agent', ['mesh-iptables', '--help']);
  assert.match(help.stdout, /--redirect-dns .*\$MESH_META_DNS_CAPTURE/);
});

test('a bad flag value fails before anything is done, naming the flag and what it expects', async () => {
  const cases: [string[], RegExp][] = [
    [['-m', 'NAT'], /"-m, --mesh-inbound-interception-mode" flag: expected REDIRECT or TPROXY/],
    [['-i', '10.0.0.0/33'], /"-i, --mesh-service-cidr" flag: expected comma-separated CIDRs.*"10\.0\.0\.0\/33" is not one/],
    [['-x', '*'], /"-x, --mesh-service-exclude-cidr" flag/],
    [['-p', '70000'], /"-p, --dataplane-port" flag: expected a port number/],
    [['-b', '80,http'], /"-b, --mesh-inbound-ports" flag: .*"http" is not one/],
    [['-t', 'mark'], /"-t, --mesh-inbound-tproxy-mark" flag/],
    [['--probe-timeout', 'soon'], /"--probe-timeout" flag: expected a duration/],
  ];
  for (const [args, message] of cases) {
    const r = await run('pilot-agent', ['mesh-iptables', '-n', ...args]);
    assert.equal(r.code, 1, `${args.join(' ')} was accepted`);
    assert.match(r.stderr, message);
    assert.equal(r.stdout, '', `${args.join(' ')} printed rules`);
  }
});
