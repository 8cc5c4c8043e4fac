// mesh-iptables flags for tests: given by long name, typed and defaulted by the command's own table.
import assert from 'node:assert/strict';
import { FlagValues } from '../../src/cli/command.js';
import { defaultValue, parseValue, type FlagType, type FlagValueOf } from '../../src/cli/flags.js';
import { IPTABLES_FLAGS } from '../../src/cli/pilot-agent.js';

export function flagsOf(args: Record<string, string>): FlagValues {
  const defs = new Map(IPTABLES_FLAGS.map((f) => [f.name, f]));
  for (const name of Object.keys(args)) assert.ok(defs.has(name), `mesh-iptables has no flag --${name}`);
  const values = new Map<string, FlagValueOf<FlagType>>();
  for (const f of IPTABLES_FLAGS) values.set(f.name, f.name in args ? parseValue(f, args[f.name]!) : defaultValue(f));
  return new FlagValues(defs, values, new Set(Object.keys(args)));
}
