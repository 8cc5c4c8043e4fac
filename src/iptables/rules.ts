// A list of iptables rules per address family, in the order they are written. Rules are kept as
// argument vectors (what `iptables -t <table>` takes after the table); the restore text and the
// command lines are renderings of the same list (restore.ts), so dry runs print what is applied.

export type Table = 'filter' | 'mangle' | 'nat' | 'raw';
export type Family = 4 | 6;

export interface Rule {
  readonly table: Table;
  readonly chain: string;
  /** `-A <chain> ...` or `-I <chain> <position> ...`. */
  readonly args: readonly string[];
}

/** The chains the mesh owns: made, flushed and deleted by mesh-iptables / mesh-clean-iptables. */
export const CHAIN_PREFIX = 'MESH_';

/** Chains and targets the kernel provides; never created or deleted by us. */
const BUILT_IN = new Set([
  'PREROUTING', 'INPUT', 'FORWARD', 'OUTPUT', 'POSTROUTING',
  'ACCEPT', 'DROP', 'RETURN', 'REDIRECT', 'TPROXY', 'MARK', 'CONNMARK', 'CT',
]);

export function isBuiltIn(chain: string): boolean {
  return BUILT_IN.has(chain);
}

/** Placeholder in a dual-stack rule for the family's own address (127.0.0.1/32 vs ::1/128). */
export const FAMILY_ADDRESS = '<family-address>';

export class RuleSet {
  private readonly rules: Record<Family, Rule[]> = { 4: [], 6: [] };

  /** ipv6: whether rules for IPv6 are written at all (the pod has IPv6 addresses). */
  constructor(readonly ipv6: boolean) {}

  get(family: Family): readonly Rule[] {
    return this.rules[family];
  }

  append(table: Table, chain: string, ...args: string[]): this {
    return this.appendFor(4, table, chain, ...args).appendFor(6, table, chain, ...args);
  }

  appendFor(family: Family, table: Table, chain: string, ...args: string[]): this {
    return this.add(family, { table, chain, args: ['-A', chain, ...args] });
  }

  insert(table: Table, chain: string, position: number, ...args: string[]): this {
    return this.insertFor(4, table, chain, position, ...args).insertFor(6, table, chain, position, ...args);
  }

  insertFor(family: Family, table: Table, chain: string, position: number, ...args: string[]): this {
    return this.add(family, { table, chain, args: ['-I', chain, String(position), ...args] });
  }

  /** A dual-stack rule naming an address: `v4` replaces FAMILY_ADDRESS in IPv4's rule, `v6` in IPv6's. */
  appendVersioned(v4: string, v6: string, table: Table, chain: string, ...args: string[]): this {
    const sub = (value: string) => args.map((a) => (a === FAMILY_ADDRESS ? value : a));
    return this.appendFor(4, table, chain, ...sub(v4)).appendFor(6, table, chain, ...sub(v6));
  }

  private add(family: Family, rule: Rule): this {
    if (family === 4 || this.ipv6) this.rules[family].push(rule);
    return this;
  }
}

/** The target of a rule (`-j X`), if it jumps. */
export function jumpTarget(args: readonly string[]): string | undefined {
  const i = args.lastIndexOf('-j');
  return i >= 0 ? args[i + 1] : undefined;
}

/**
 * The chains a rule list needs created, per table, in first-use order: chains rules are added to,
 * then chains only jumped to (an empty chain a rule jumps to must still exist).
 */
export function chainsToCreate(rules: readonly Rule[]): Map<Table, string[]> {
  const out = new Map<Table, string[]>();
  const add = (table: Table, chain: string | undefined) => {
    if (!chain || isBuiltIn(chain)) return;
    const list = out.get(table) ?? [];
    if (!list.includes(chain)) list.push(chain);
    out.set(table, list);
  };
  for (const r of rules) add(r.table, r.chain);
  for (const r of rules) add(r.table, jumpTarget(r.args));
  return out;
}
