// A command tree on commander, with the behaviour users know from the Go mesh's cobra CLIs:
// cobra-style help, inherited ("global") flags, one-line errors with "did you mean", and typed flag
// values with defaults resolved from the environment.
import { Command, CommanderError, Option } from 'commander';
import { compareText } from '../common/compare.js';
import { formatDuration } from '../common/duration.js';
import { defaultValue, FlagError, flagUsages, parseValue, type FlagDef, type FlagType, type FlagValueOf } from './flags.js';

export interface CommandDef {
  readonly name: string;
  /** One line for the parent's command list. */
  readonly short: string;
  /** Paragraph shown at the top of this command's help. */
  readonly long?: string;
  /** Positional arguments in commander syntax, e.g. `<method> <path> [body]`. */
  readonly args?: string;
  readonly flags?: readonly FlagDef[];
  /** Flags this command and every command below it accept (cobra's persistent flags). */
  readonly persistentFlags?: readonly FlagDef[];
  readonly subcommands?: readonly CommandDef[];
  /** Extra help text after the flag tables. */
  readonly footer?: () => string;
  readonly run?: (ctx: RunContext) => Promise<number | void>;
}

/** Typed access to the parsed flags of one invocation. */
export class FlagValues {
  constructor(
    private readonly defs: ReadonlyMap<string, FlagDef>,
    private readonly values: ReadonlyMap<string, FlagValueOf<FlagType>>,
    /** Flags given on the command line, for "set but not yet effective" notices. */
    readonly explicit: ReadonlySet<string>,
  ) {}

  private get<T extends FlagType>(name: string, types: readonly T[]): FlagValueOf<T> {
    const def = this.defs.get(name);
    if (!def || !(types as readonly FlagType[]).includes(def.type)) {
      throw new Error(`flag --${name} is not declared as ${types.join('/')} on this command`);
    }
    return this.values.get(name) as FlagValueOf<T>;
  }

  string(name: string): string {
    return this.get(name, ['string']);
  }
  bool(name: string): boolean {
    return this.get(name, ['bool']);
  }
  number(name: string): number {
    return this.get(name, ['int', 'uint16', 'float32']);
  }
  duration(name: string): bigint {
    return this.get(name, ['duration']);
  }
  list(name: string): string[] {
    return this.get(name, ['stringSlice', 'stringArray']);
  }
  /** Every flag with its value as text, for the introspection UI's command-line view. */
  snapshot(): FlagSnapshot[] {
    return [...this.defs.values()]
      .filter((f) => f.name !== 'help')
      .map((f) => ({ name: f.name, value: flagText(this.values.get(f.name)), default: f.default, explicit: this.explicit.has(f.name), effective: f.effective }))
      .sort((a, b) => compareText(a.name, b.name));
  }
  /** Flags the user set that change nothing yet, for the startup notice. */
  explicitIneffective(): FlagDef[] {
    return [...this.defs.values()].filter((f) => !f.effective && this.explicit.has(f.name));
  }
}

export interface FlagSnapshot {
  readonly name: string;
  readonly value: string;
  readonly default: string;
  /** Given on the command line. */
  readonly explicit: boolean;
  readonly effective: boolean;
}

function flagText(v: FlagValueOf<FlagType> | undefined): string {
  if (typeof v === 'bigint') return formatDuration(v);
  if (Array.isArray(v)) return v.join(',');
  return String(v ?? '');
}

export interface RunContext {
  readonly flags: FlagValues;
  readonly args: string[];
  /** `pilot-discovery discovery`, for messages. */
  readonly path: string;
}

/** An error the user caused; printed as one line without a stack trace. */
export class UsageError extends Error {}

const HELP_FLAG = (name: string): FlagDef => ({ name: 'help', short: 'h', type: 'bool', default: 'false', usage: `help for ${name}`, effective: true });

function pathOf(chain: readonly CommandDef[]): string {
  return chain.map((c) => c.name).join(' ');
}

function inheritedFlags(chain: readonly CommandDef[]): FlagDef[] {
  return chain.slice(0, -1).flatMap((c) => c.persistentFlags ?? []);
}

function localFlags(def: CommandDef): FlagDef[] {
  return [...(def.flags ?? []), ...(def.persistentFlags ?? [])];
}

function allFlags(chain: readonly CommandDef[]): FlagDef[] {
  return [...localFlags(chain[chain.length - 1]!), ...inheritedFlags(chain)];
}

const byName = (a: FlagDef, b: FlagDef) => compareText(a.name, b.name);

/** Help text in cobra's layout. */
export function renderHelp(chain: readonly CommandDef[]): string {
  const def = chain[chain.length - 1]!;
  const path = pathOf(chain);
  const out: string[] = [(def.long ?? def.short).trimEnd(), '', 'Usage:'];
  if (def.run) out.push(`  ${path}${def.args ? ` ${def.args}` : ''} [flags]`);
  if (def.subcommands?.length) out.push(`  ${path} [command]`);
  if (def.subcommands?.length) {
    const subs = [...def.subcommands, { name: 'help', short: 'Help about any command' }].sort((a, b) => compareText(a.name, b.name));
    const w = Math.max(...subs.map((s) => s.name.length));
    out.push('', 'Available Commands:', ...subs.map((s) => `  ${s.name.padEnd(w)}  ${s.short}`));
  }
  out.push('', 'Flags:', flagUsages([...localFlags(def), HELP_FLAG(def.name)].sort(byName)));
  const inherited = inheritedFlags(chain);
  if (inherited.length) out.push('', 'Global Flags:', flagUsages([...inherited].sort(byName)));
  if (def.footer) out.push('', def.footer().trimEnd());
  if (def.subcommands?.length) out.push('', `Use "${path} [command] --help" for more information about a command.`);
  return out.join('\n') + '\n';
}

/**
 * pflag lets a bool flag stand alone (`--short`) or take `=value` (`--short=false`), and never
 * consumes the next word. Rewriting bare bools to `--name=true` gives commander the same meaning.
 */
function normalizeBools(argv: string[], flags: readonly FlagDef[]): string[] {
  const bools = new Map<string, FlagDef>();
  for (const f of flags) {
    if (f.type !== 'bool') continue;
    bools.set(`--${f.name}`, f);
    if (f.short) bools.set(`-${f.short}`, f);
  }
  const out: string[] = [];
  let passthrough = false;
  for (const tok of argv) {
    if (passthrough || tok === '--') {
      passthrough = true;
      out.push(tok);
      continue;
    }
    const eq = tok.indexOf('=');
    const head = eq < 0 ? tok : tok.slice(0, eq);
    const f = bools.get(head);
    out.push(f ? `--${f.name}=${eq < 0 ? 'true' : tok.slice(eq + 1)}` : tok);
  }
  return out;
}

function optionFor(flag: FlagDef): Option {
  const spec = `${flag.short ? `-${flag.short}, ` : ''}--${flag.name} <value>`;
  return new Option(spec, flag.usage).argParser((value: string, prev: string[] | undefined) => [...(prev ?? []), value]);
}

/** Turns raw occurrences into typed values with pflag's rules; the last occurrence of a scalar wins. */
function typedValues(flags: readonly FlagDef[], raw: Record<string, string[] | undefined>): FlagValues {
  const defs = new Map(flags.map((f) => [f.name, f]));
  const values = new Map<string, FlagValueOf<FlagType>>();
  const explicit = new Set<string>();
  for (const f of flags) {
    const occ = raw[camel(f.name)];
    if (occ === undefined) {
      values.set(f.name, defaultValue(f));
      continue;
    }
    explicit.add(f.name);
    const parsed = occ.map((o) => parseValue(f, o));
    values.set(f.name, f.type === 'stringSlice' || f.type === 'stringArray' ? (parsed as string[][]).flat() : parsed[parsed.length - 1]!);
  }
  return new FlagValues(defs, values, explicit);
}

/** commander stores `--log_as_json` as `log_as_json` and `--dry-run` as `dryRun`. */
function camel(name: string): string {
  return name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

function firstLine(err: CommanderError, chain: readonly CommandDef[]): string {
  const msg = err.message.replace(/^error: /, '');
  const suggestion = /\(Did you mean (.+)\?\)/.exec(msg)?.[1];
  const hint = suggestion ? ` (did you mean ${suggestion}?)` : '';
  const option = /unknown option '([^']+)'/.exec(msg)?.[1];
  if (option) return `unknown flag: ${option.split('=')[0]}${hint}`;
  const command = /unknown command '([^']+)'/.exec(msg)?.[1];
  if (command) return `unknown command "${command}" for "${pathOf(chain)}"${hint}`;
  const def = chain[chain.length - 1]!;
  const usage = `usage: ${pathOf(chain)}${def.args ? ` ${def.args}` : ''} [flags]`;
  const missing = /missing required argument '([^']+)'/.exec(msg)?.[1];
  if (missing) return `missing required argument "${missing}" (${usage})`;
  if (/too many arguments/.test(msg)) return `too many arguments for "${pathOf(chain)}" (${usage})`;
  return msg.split('\n')[0]!;
}

function build(chain: CommandDef[], onRun: (def: CommandDef, ctx: RunContext) => Promise<void>): Command {
  const def = chain[chain.length - 1]!;
  const cmd = new Command(def.name).description(def.short).helpOption('-h, --help', `help for ${def.name}`);
  cmd.configureHelp({ formatHelp: () => renderHelp(chain) });
  cmd.exitOverride();
  cmd.configureOutput({ writeErr: () => undefined, writeOut: (s) => process.stdout.write(s) });
  cmd.showSuggestionAfterError(true);
  for (const f of allFlags(chain)) cmd.addOption(optionFor(f));
  if (def.args) cmd.arguments(def.args);
  for (const sub of def.subcommands ?? []) cmd.addCommand(build([...chain, sub], onRun));
  if (def.subcommands?.length) cmd.addHelpCommand('help [command]', 'Help about any command');
  if (def.run) {
    cmd.action(async (...params: unknown[]) => {
      const self = params[params.length - 1] as Command;
      const args = params.slice(0, -2).filter((p): p is string => typeof p === 'string');
      const raw = { ...(self.parent?.opts() ?? {}), ...self.opts() } as Record<string, string[] | undefined>;
      await onRun(def, { flags: typedValues(allFlags(chain), raw), args, path: pathOf(chain) });
    });
  }
  return cmd;
}

/**
 * Parses argv against the tree and runs the chosen command. Resolves to the process exit code;
 * user errors print one line on stderr (`Error: ...`) and give exit code 1.
 */
export async function execute(root: CommandDef, argv: string[]): Promise<number> {
  const chain = [root];
  const sub = root.subcommands?.find((s) => argv.find((a) => !a.startsWith('-')) === s.name);
  if (sub) chain.push(sub);
  // cobra prints the root's help for a bare invocation and exits 0; commander would exit 1.
  if (!root.run && argv.every((a) => a.startsWith('-')) && !argv.some((a) => a === '-h' || a === '--help')) {
    process.stdout.write(renderHelp(chain));
    return 0;
  }
  let code = 0;
  const program = build([root], async (def, ctx) => {
    const r = await def.run!(ctx);
    code = typeof r === 'number' ? r : 0;
  });
  try {
    await program.parseAsync(normalizeBools(argv, allFlags(chain)), { from: 'user' });
    return code;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.help' || e.code === 'commander.version') return 0;
      if (e.code === 'commander.executeSubCommandAsync') return 0;
      process.stderr.write(`Error: ${firstLine(e, chain)}\n`);
      return 1;
    }
    if (e instanceof FlagError || e instanceof UsageError) {
      process.stderr.write(`Error: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}
