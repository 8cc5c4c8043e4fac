// mesh-clean-iptables' plan from a real iptables-save dump (testdata/saved-tproxy-dns-virt.txt:
// `mesh-iptables -m TPROXY -b '*' -i 10.0.0.0/8 -k eth1 -u 1337 -g 1337 --redirect-dns` on nft, after
// the pod's own `nat PREROUTING -i eth9 -j RETURN` and `mangle OUTPUT ... --mark 0x7 -j RETURN`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanRestoreLines, parseSave, passthroughAddressRemoval, planClean, tproxyRouteTables } from '../../src/iptables/clean.js';
import { REPO_ROOT } from '../helpers/proc.js';

const dump = readFileSync(join(REPO_ROOT, 'test', 'iptables', 'testdata', 'saved-tproxy-dns-virt.txt'), 'utf8');
const owners = { uids: ['1337'], gids: ['1337'] };

function cleanText(text: string, opts = owners): string[] {
  return cleanRestoreLines(planClean(parseSave(text), opts)).map((l) => l.text);
}

test('removes the jumps, the -k short-circuit and the TPROXY mark rules, then every MESH_ chain, table by table', () => {
  const lines = cleanText(dump);
  assert.deepEqual(lines.slice(0, lines.indexOf('COMMIT') + 1), [
    '*mangle',
    '-D PREROUTING -p tcp -j MESH_INBOUND',
    '-D PREROUTING -p tcp -m mark --mark 0x539 -j CONNMARK --save-mark --nfmask 0xffffffff --ctmask 0xffffffff',
    '-D OUTPUT -o lo -p tcp -m mark --mark 0x539 -j RETURN',
    '-D OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --uid-owner 1337 -j MARK --set-xmark 0x53a/0xffffffff',
    '-D OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --gid-owner 1337 -j MARK --set-xmark 0x53a/0xffffffff',
    '-D OUTPUT -p tcp -m connmark --mark 0x539 -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff',
    '-F MESH_DIVERT', '-F MESH_INBOUND', '-F MESH_TPROXY',
    '-X MESH_DIVERT', '-X MESH_INBOUND', '-X MESH_TPROXY',
    'COMMIT',
  ]);
  assert.ok(lines.includes('-D PREROUTING -d 10.0.0.0/8 -i eth1 -j MESH_REDIRECT'));
  assert.ok(lines.includes('-D PREROUTING -i eth1 -j RETURN'));
  assert.ok(lines.includes('-D OUTPUT -j MESH_OUTPUT_DNS'));
  for (const c of ['MESH_INBOUND', 'MESH_IN_REDIRECT', 'MESH_OUTPUT', 'MESH_OUTPUT_DNS', 'MESH_REDIRECT']) assert.ok(lines.includes(`-X ${c}`), c);
});

test("the pod's own rules stay, even when they look like ours", () => {
  const lines = cleanText(dump).join('\n');
  assert.doesNotMatch(lines, /eth9/);
  assert.doesNotMatch(lines, /--mark 0x7 /);
});

test('owner mark rules are removed only for the -u / -g owners', () => {
  const lines = cleanText(dump, { uids: ['42'], gids: ['42'] });
  assert.equal(lines.filter((l) => l.includes('--set-xmark 0x53a')).length, 0);
});

test('nothing of ours left: nothing to do (a second run changes nothing)', () => {
  const ours = /MESH_|-i eth1 -j RETURN|0x539|0x53a/;
  const remaining = dump.split('\n').filter((l) => !ours.test(l)).join('\n');
  assert.deepEqual(cleanText(remaining), []);
});

test("TPROXY's policy rules are found by the mesh's mark", () => {
  const rules = '0:\tfrom all lookup local\n32764:\tfrom all fwmark 0x7 lookup 7\n32765:\tfrom all fwmark 0x539 lookup 133\n32766:\tfrom all lookup main\n';
  assert.deepEqual(tproxyRouteTables(rules, planClean(parseSave(dump), owners).marks), [{ mark: 1337, table: '133' }]);
});

test('the ::6 inbound passthrough source on lo is removed while `ip -6 addr show dev lo` lists it, and not after', () => {
  const lo = `1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 state UNKNOWN qlen 1000
    inet6 ::6/128 scope global
       valid_lft forever preferred_lft forever
    inet6 ::1/128 scope host
       valid_lft forever preferred_lft forever
`;
  assert.deepEqual(passthroughAddressRemoval(lo), [['-6', 'addr', 'del', '::6/128', 'dev', 'lo']]);
  assert.deepEqual(passthroughAddressRemoval(lo.replace('::6/128', '::7/128')), []);
  assert.deepEqual(passthroughAddressRemoval(''), []);
});
