// Every flag of every command, as the spec's tables write it (name, shorthand, type, default),
// appears in that command's --help in pflag's rendering. The spec file is read directly, so a
// flag added to the spec and missing here fails the test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, run, type Program } from '../helpers/proc.js';

interface SpecFlag {
  name: string;
  short: string;
  type: string;
  default: string;
}

const spec = readFileSync(join(REPO_ROOT, '..', 'shared', 'spec', 'commands.md'), 'utf8');

/** Rows of the first table after a heading. */
function table(heading: string): SpecFlag[] {
  const start = spec.indexOf(heading);
  assert.ok(start >= 0, `spec has a section "${heading}"`);
  const lines = spec.slice(start).split('\n').slice(1);
  const from = lines.findIndex((l) => l.startsWith('|'));
  const to = lines.findIndex((l, i) => i > from && !l.startsWith('|'));
  const rows = lines.slice(from, to);
  const header = rows[0]!.split('|').map((c) => c.trim());
  const hasShort = header.includes('Short');
  return rows.slice(2).map((r) => {
    const c = r.split('|').slice(1, -1).map((x) => x.trim());
    const [flag, short, type, dflt] = hasShort ? c : [c[0]!, '', c[1]!, c[2]!];
    return { name: flag!.replace(/`/g, '').replace(/^--/, ''), short: short!.replace(/`/g, '').replace(/^-/, ''), type: type!, default: dflt! };
  });
}

const PFLAG_TYPE: Record<string, string> = { string: 'string', boolean: '', int: 'int', uint16: 'uint16', float32: 'float32', duration: 'duration', stringSlice: 'strings', stringArray: 'stringArray' };

/** The `(default ...)` text pflag prints for the spec's default cell; '' when nothing is printed. */
function expectedDefault(f: SpecFlag): string {
  let d = f.default.replace(/`/g, '');
  const viaEnv = /^\$\w+(?:, i\.e\. (.*))?$/.exec(d);
  if (viaEnv) d = viaEnv[1] ?? '';
  if (f.type === 'boolean') return f.name === 'short' ? '(default true)' : d === 'off' ? '' : `(default ${d})`;
  if (d === 'empty' || d === '' || d === '0') return '';
  return f.type === 'string' ? `(default "${d}")` : `(default ${d})`;
}

function assertFlag(help: string, f: SpecFlag, where: string): void {
  const head = f.short ? `-${f.short}, --${f.name}` : `--${f.name}`;
  const type = PFLAG_TYPE[f.type];
  assert.ok(type !== undefined, `known spec type ${f.type}`);
  const line = help.split('\n').find((l) => l.trimStart().startsWith(`${head} `) || l.trimStart() === head || l.trimStart().startsWith(`${head}\t`));
  assert.ok(line, `${where}: help lists ${head}\n${help}`);
  const afterName = line.trimStart().slice(head.length);
  if (type) assert.match(afterName, new RegExp(`^ ${type} `), `${where}: ${head} has type ${type}: ${line}`);
  else assert.match(afterName, /^ {3,}/, `${where}: ${head} is a bool flag without a type word: ${line}`);
  const dflt = expectedDefault(f);
  if (dflt) assert.ok(line.includes(dflt), `${where}: ${head} shows ${dflt}: ${line}`);
  else assert.ok(!/\(default /.test(line), `${where}: ${head} shows no default: ${line}`);
}

const logFlags = table('### Common log flags');
const discoveryCommon = table('### Flags common to all `pilot-discovery` commands');
const versionFlags = table('### `version` flags');
const cleanFlags = table('### `pilot-agent mesh-clean-iptables` flags');

const COMMANDS: Array<[Program, string[], SpecFlag[]]> = [
  ['pilot-discovery', ['discovery'], [...table('### `pilot-discovery discovery` flags'), ...discoveryCommon, ...logFlags]],
  ['pilot-discovery', ['request'], [...discoveryCommon, ...logFlags]],
  ['pilot-discovery', ['version'], [...versionFlags, ...discoveryCommon, ...logFlags]],
  ['pilot-agent', ['mesh-clean-iptables'], [...cleanFlags, ...logFlags]],
  ['pilot-agent', ['mesh-iptables'], [...cleanFlags, ...table('### `pilot-agent mesh-iptables` flags'), ...logFlags]],
  ['pilot-agent', ['proxy'], [...table('### `pilot-agent proxy` flags'), ...logFlags]],
  ['pilot-agent', ['request'], logFlags],
  ['pilot-agent', ['version'], [...versionFlags, ...logFlags]],
  ['pilot-agent', ['wait'], [...table('### `pilot-agent wait` flags'), ...logFlags]],
];

for (const [program, cmd, flags] of COMMANDS) {
  test(`${program} ${cmd.join(' ')} --help lists every spec flag with its type and default`, async () => {
    const r = await run(program, [...cmd, '--help']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`Usage:\\n  ${program} ${cmd.join(' ')}`));
    for (const f of flags) assertFlag(r.stdout, f, `${program} ${cmd.join(' ')}`);
  });
}

test('every command of the spec is listed by its program', async () => {
  const commands = [...spec.matchAll(/^\| `(pilot-discovery|pilot-agent) ([a-z-]+)[^`]*` \|/gm)].map((m) => [m[1], m[2]] as const);
  assert.ok(commands.length >= 9);
  for (const [program, name] of commands) {
    const r = await run(program as Program, ['--help']);
    assert.match(r.stdout, new RegExp(`^  ${name} +\\S`, 'm'), `${program} --help lists ${name}`);
  }
});

test('a bare program prints its help and exits 0, like cobra', async () => {
  const r = await run('pilot-agent', []);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /Available Commands:/);
});

test('defaults that reference the environment resolve from it', async () => {
  const d = await run('pilot-discovery', ['discovery', '--help'], { env: { POD_NAMESPACE: 'team-a' } });
  assert.match(d.stdout, /-n, --namespace string .*\(default "team-a"\)/);
  const env = { DATAPLANE_PORT: '16001', INBOUND_CAPTURE_PORT: '16006', INBOUND_TUNNEL_PORT: '16008', MESH_LOCAL_EXCLUDE_PORTS: '22,80', MESH_SERVICE_EXCLUDE_CIDR: '10.0.0.0/8' };
  const a = await run('pilot-agent', ['mesh-iptables', '--help'], { env });
  assert.match(a.stdout, /-p, --dataplane-port string .*\(default "16001"\)/);
  assert.match(a.stdout, /-z, --inbound-capture-port string .*\(default "16006"\)/);
  assert.match(a.stdout, /-e, --inbound-tunnel-port string .*\(default "16008"\)/);
  assert.match(a.stdout, /-d, --mesh-local-exclude-ports string .*\(default "22,80"\)/);
  assert.match(a.stdout, /-x, --mesh-service-exclude-cidr string .*\(default "10.0.0.0\/8"\)/);
});

test('help says plainly which flags and variables are accepted but not yet effective', async () => {
  const d = await run('pilot-discovery', ['discovery', '--help']);
  assert.match(d.stdout, /--caCertFile string .*\(accepted, not yet effective\)/);
  const r = await run('pilot-agent', ['proxy', '--help']);
  assert.doesNotMatch(r.stdout, /--stsPort int .*not yet effective/);
  assert.match(r.stdout, /Environment variables accepted but not yet effective: .*CREDENTIAL_FETCHER_TYPE/s);
  const w = await run('pilot-agent', ['wait', '--help']);
  assert.doesNotMatch(w.stdout, /--url string .*not yet effective/);
});
