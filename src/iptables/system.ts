// The I/O edge of capture: the pod's facts (addresses, name servers, the proxy user), the iptables
// backend in use, iptables-save / iptables-restore and `ip`. Everything else in src/iptables is pure.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { setting } from '../common/env.js';
import type { PodFacts } from './config.js';
import type { RestoreLine } from './restore.js';
import { isBuiltIn, type Family } from './rules.js';

/** The Go mesh's proxy UID when its user does not exist. */
const DEFAULT_PROXY_UID = '1337';

export class CaptureError extends Error {}

function readOr(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/** `nameserver` lines of a resolv.conf. */
export function nameServers(resolvConf: string): string[] {
  return [...resolvConf.matchAll(/^\s*nameserver\s+(\S+)/gm)].map((m) => m[1]!.replace(/%.*$/, ''));
}

/** The UID of `user` in a passwd file, if listed. */
export function uidOf(passwd: string, user: string): string | undefined {
  for (const line of passwd.split('\n')) {
    const [name, , uid] = line.split(':');
    if (name === user && uid && /^\d+$/.test(uid)) return uid;
  }
  return undefined;
}

export function podFacts(): PodFacts {
  const ipv6 = Object.values(networkInterfaces())
    .flat()
    .some((a) => a !== undefined && a.family === 'IPv6' && !a.internal && !/^fe[89ab]/i.test(a.address));
  return {
    ipv6,
    dnsServers: nameServers(readOr('/etc/resolv.conf')),
    defaultProxyUid: uidOf(readOr('/etc/passwd'), setting('PROXY_USER')) ?? DEFAULT_PROXY_UID,
  };
}

export interface Backend {
  readonly family: Family;
  /** `legacy`, `nft`, or `default` (the unsuffixed binaries). */
  readonly variant: string;
  readonly iptables: string;
  readonly save: string;
  readonly restore: string;
}

function binaries(family: Family, variant: string): Backend {
  const base = family === 4 ? 'iptables' : 'ip6tables';
  const bin = variant === 'default' ? base : `${base}-${variant}`;
  return { family, variant, iptables: bin, save: `${bin}-save`, restore: `${bin}-restore` };
}

interface Ran {
  readonly ok: boolean;
  readonly stdout: string;
  readonly stderr: string;
}

function run(cmd: string, args: readonly string[], input?: string): Ran {
  const r = spawnSync(cmd, args, { input, encoding: 'utf8' });
  if (r.error) return { ok: false, stdout: '', stderr: r.error.message };
  return { ok: r.status === 0, stdout: r.stdout, stderr: r.stderr.trim() };
}

/** Whether an iptables-save dump holds any rule or chain of its own (not just empty built-ins). */
export function hasRules(dump: string): boolean {
  return dump.split('\n').some((l) => l.startsWith('-A ') || (l.startsWith(':') && !isBuiltIn(l.slice(1).split(' ')[0]!)));
}

/**
 * The backend the pod's rules live in, chosen as the Go mesh does: legacy when legacy already holds
 * rules here, else nft when it works, else the plain binaries.
 */
export function detectBackend(family: Family): Backend {
  const legacy = binaries(family, 'legacy');
  const dump = run(legacy.save, []);
  if (dump.ok && hasRules(dump.stdout)) return legacy;
  for (const variant of ['nft', 'default']) {
    const b = binaries(family, variant);
    if (run(b.save, []).ok) return b;
  }
  throw new CaptureError(`no working ${binaries(family, 'default').save} (tried the legacy, nft and plain binaries; Debian: apt-get install iptables)`);
}

export function save(b: Backend): string {
  const r = run(b.save, []);
  if (!r.ok) throw new CaptureError(`${b.save} failed: ${r.stderr}`);
  return r.stdout;
}

/** Applies restore input (one transaction per table); a rejected line is named with its rule. */
export function restore(b: Backend, lines: readonly RestoreLine[]): void {
  const r = run(b.restore, ['--noflush'], lines.map((l) => `${l.text}\n`).join(''));
  if (r.ok) return;
  const at = /line:?\s*(\d+)/i.exec(r.stderr);
  const line = at ? lines[Number(at[1]) - 1] : undefined;
  const what = line?.rule ? `rule "${line.text}" (table ${line.rule.table}) was rejected` : line ? `line ${at![1]} "${line.text}" was rejected` : 'it failed';
  throw new CaptureError(`${b.restore} --noflush: ${what}: ${r.stderr.split('\n')[0]}; nothing was applied for IPv${b.family}`);
}

/** Runs `iptables <args>`; false when it fails (for deletions of what may be gone already). */
export function iptables(b: Backend, args: readonly string[]): Ran {
  return run(b.iptables, args);
}

export function ip(args: readonly string[]): Ran {
  return run('ip', args);
}
