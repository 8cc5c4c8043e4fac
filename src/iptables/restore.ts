// Renderings of a rule list: the input of `iptables-restore --noflush` (applied atomically, one
// transaction per table) and the equivalent `iptables` command lines (what --dry-run prints).
import { chainsToCreate, type Family, type Rule, type Table } from './rules.js';

/** Tables in iptables-save's order. */
const TABLES: readonly Table[] = ['filter', 'mangle', 'nat', 'raw'];

export interface RestoreLine {
  readonly text: string;
  /** The rule the line writes, to name it when iptables-restore rejects that line. */
  readonly rule?: Rule;
}

/** iptables-restore input: per table, the new chains then the rules in order, then COMMIT. */
export function restoreLines(rules: readonly Rule[]): RestoreLine[] {
  const chains = chainsToCreate(rules);
  const out: RestoreLine[] = [];
  for (const table of TABLES) {
    const inTable = rules.filter((r) => r.table === table);
    if (inTable.length === 0) continue;
    out.push({ text: `*${table}` });
    for (const chain of chains.get(table) ?? []) out.push({ text: `-N ${chain}` });
    for (const rule of inTable) out.push({ text: rule.args.join(' '), rule });
    out.push({ text: 'COMMIT' });
  }
  return out;
}

export function restoreText(rules: readonly Rule[]): string {
  return restoreLines(rules).map((l) => `${l.text}\n`).join('');
}

export function binaryName(family: Family): string {
  return family === 4 ? 'iptables' : 'ip6tables';
}

/** The same changes as `iptables` commands, in the order a shell script would run them. */
export function commandLines(family: Family, rules: readonly Rule[]): string[] {
  const bin = binaryName(family);
  const out: string[] = [];
  for (const [table, chains] of chainsToCreate(rules)) for (const c of chains) out.push(`${bin} -t ${table} -N ${c}`);
  for (const r of rules) out.push(`${bin} -t ${r.table} ${r.args.join(' ')}`);
  return out;
}
