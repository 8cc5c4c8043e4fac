// What mesh-clean-iptables removes, worked out from the live rules (an iptables-save dump) rather
// than re-derived from flags: the MESH_* chains, every rule of a built-in chain that jumps to one,
// the virtual-interface short-circuits beside those jumps, and TPROXY's mark rules (recognised by the
// marks the MESH_* chains use). Pure: a dump in, the changes out. Running it twice changes nothing
// the second time because nothing of ours is left to find.
import { PASSTHROUGH_SOURCE } from './capture.js';
import { OUTBOUND_MARK } from './config.js';
import type { RestoreLine } from './restore.js';
import { CHAIN_PREFIX, isBuiltIn, jumpTarget, type Table } from './rules.js';

export interface SavedRule {
  readonly table: Table;
  readonly chain: string;
  /** The rule's tokens after `-A <chain>`, as iptables-save printed them. */
  readonly spec: readonly string[];
}

export interface SavedState {
  readonly chains: ReadonlyMap<Table, readonly string[]>;
  readonly rules: readonly SavedRule[];
}

const TABLES = new Set<string>(['filter', 'mangle', 'nat', 'raw']);

/** The tables, chains and rules of an iptables-save dump (tables other than ours are skipped). */
export function parseSave(dump: string): SavedState {
  const chains = new Map<Table, string[]>();
  const rules: SavedRule[] = [];
  let table: Table | undefined;
  for (const line of dump.split('\n')) {
    if (line.startsWith('*')) {
      const t = line.slice(1).trim();
      table = TABLES.has(t) ? (t as Table) : undefined;
    } else if (!table) {
      continue;
    } else if (line.startsWith(':')) {
      chains.set(table, [...(chains.get(table) ?? []), line.slice(1).split(' ')[0]!]);
    } else if (line.startsWith('-A ')) {
      const [, chain, ...spec] = line.trim().split(/\s+/);
      rules.push({ table, chain: chain!, spec });
    }
  }
  return { chains, rules };
}

function isOurs(chain: string | undefined): boolean {
  return chain !== undefined && chain.startsWith(CHAIN_PREFIX);
}

/** A mark as a number (iptables-save prints hex, flags are decimal); `0x539/0xffffffff` -> 1337. */
function markValue(token: string | undefined): number | undefined {
  if (token === undefined) return undefined;
  const n = Number(token.split('/')[0]);
  return Number.isInteger(n) ? n : undefined;
}

function after(spec: readonly string[], flag: string): string | undefined {
  const i = spec.indexOf(flag);
  return i >= 0 ? spec[i + 1] : undefined;
}

/** The TPROXY marks the mesh's mangle chains use (MESH_DIVERT sets it, MESH_INBOUND checks it). */
export function meshMarks(state: SavedState): Set<number> {
  const marks = new Set<number>();
  for (const r of state.rules) {
    if (r.table !== 'mangle' || !isOurs(r.chain)) continue;
    for (const flag of ['--set-xmark', '--set-mark', '--mark', '--tproxy-mark']) {
      const m = markValue(after(r.spec, flag));
      if (m !== undefined && m !== Number(OUTBOUND_MARK)) marks.add(m);
    }
  }
  return marks;
}

export interface CleanOptions {
  /** Owners whose TPROXY loopback mark rules mesh-iptables wrote (its -u / -g). */
  readonly uids: readonly string[];
  readonly gids: readonly string[];
}

/** A mangle rule of TPROXY mode in a built-in chain (connection mark save/restore, proxy's lo mark). */
function isTproxyMarkRule(r: SavedRule, marks: ReadonlySet<number>, opts: CleanOptions): boolean {
  if (r.table !== 'mangle' || marks.size === 0) return false;
  const target = jumpTarget(r.spec);
  const mark = markValue(after(r.spec, '--mark'));
  if ((target === 'CONNMARK' || target === 'RETURN') && mark !== undefined && marks.has(mark)) return true;
  if (target !== 'MARK' || markValue(after(r.spec, '--set-xmark') ?? after(r.spec, '--set-mark')) !== Number(OUTBOUND_MARK)) return false;
  const uid = after(r.spec, '--uid-owner');
  const gid = after(r.spec, '--gid-owner');
  return (uid !== undefined && opts.uids.includes(uid)) || (gid !== undefined && opts.gids.includes(gid));
}

export interface CleanPlan {
  /** Rules to delete, as `-D <chain> <spec>` per table, before the chains are flushed and deleted. */
  readonly deletes: readonly SavedRule[];
  readonly chains: ReadonlyMap<Table, readonly string[]>;
  readonly marks: ReadonlySet<number>;
}

export function planClean(state: SavedState, opts: CleanOptions): CleanPlan {
  const marks = meshMarks(state);
  const builtIn = state.rules.filter((r) => isBuiltIn(r.chain));
  // Interfaces of `-i <if> ... -j MESH_REDIRECT`: their `-i <if> -j RETURN` short-circuit is ours.
  const virtual = new Set(builtIn.filter((r) => r.table === 'nat' && isOurs(jumpTarget(r.spec))).map((r) => after(r.spec, '-i')));
  virtual.delete(undefined);
  const deletes = builtIn.filter((r) => {
    if (isOurs(jumpTarget(r.spec))) return true;
    if (r.table === 'nat' && r.chain === 'PREROUTING' && r.spec.length === 4 && jumpTarget(r.spec) === 'RETURN' && virtual.has(after(r.spec, '-i'))) return true;
    return isTproxyMarkRule(r, marks, opts);
  });
  const chains = new Map<Table, string[]>();
  for (const [table, list] of state.chains) {
    const ours = list.filter(isOurs);
    if (ours.length > 0) chains.set(table, ours);
  }
  return { deletes, chains, marks };
}

/** iptables-restore input removing the plan's rules and chains, one transaction per table. */
export function cleanRestoreLines(plan: CleanPlan): RestoreLine[] {
  const tables = new Set<Table>([...plan.deletes.map((d) => d.table), ...plan.chains.keys()]);
  const out: string[] = [];
  for (const table of ['filter', 'mangle', 'nat', 'raw'] as const) {
    if (!tables.has(table)) continue;
    out.push(`*${table}`);
    for (const d of plan.deletes.filter((x) => x.table === table)) out.push(`-D ${d.chain} ${d.spec.join(' ')}`);
    for (const c of plan.chains.get(table) ?? []) out.push(`-F ${c}`);
    for (const c of plan.chains.get(table) ?? []) out.push(`-X ${c}`);
    out.push('COMMIT');
  }
  return out.map((text) => ({ text }));
}

/** `ip rule` lines for TPROXY's marks: `fwmark 0x539 lookup 133` -> the routing table to drop. */
export function tproxyRouteTables(ipRules: string, marks: ReadonlySet<number>): { mark: number; table: string }[] {
  const out: { mark: number; table: string }[] = [];
  for (const m of ipRules.matchAll(/fwmark (\S+) lookup (\S+)/g)) {
    const mark = markValue(m[1]);
    if (mark !== undefined && marks.has(mark)) out.push({ mark, table: m[2]! });
  }
  return out;
}

/**
 * The `ip` command removing the inbound passthrough source mesh-iptables put on lo for an IPv6 pod,
 * when `ip -6 addr show dev lo` still lists it; nothing once it is gone, so a second clean is a no-op.
 */
export function passthroughAddressRemoval(loAddresses: string): string[][] {
  const listed = loAddresses.split('\n').some((l) => l.trim().startsWith(`inet6 ${PASSTHROUGH_SOURCE[6]} `));
  return listed ? [['-6', 'addr', 'del', PASSTHROUGH_SOURCE[6], 'dev', 'lo']] : [];
}
