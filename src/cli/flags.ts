// Flag types, defaults and help lines with the semantics users know from Go's pflag: the same type
// names, the same `(default ...)` rendering, comma-splitting for stringSlice and none for
// stringArray, Go durations, and range-checked integers.
import { DurationError, formatDuration, parseDuration } from '../common/duration.js';
import { setting, type SettingName } from '../common/env.js';

export type FlagType = 'string' | 'bool' | 'int' | 'uint16' | 'float32' | 'duration' | 'stringSlice' | 'stringArray';

export type FlagValueOf<T extends FlagType> = T extends 'bool'
  ? boolean
  : T extends 'int' | 'uint16' | 'float32'
    ? number
    : T extends 'duration'
      ? bigint
      : T extends 'stringSlice' | 'stringArray'
        ? string[]
        : string;

export interface FlagDef {
  readonly name: string;
  readonly short?: string;
  readonly type: FlagType;
  /** The default as the spec writes it, in the flag's own syntax (`1m0s`, `a,b`, `false`). */
  readonly default: string;
  /** A variable whose value, when set and non-empty, replaces the default. */
  readonly env?: SettingName;
  readonly usage: string;
  /** False: the flag is parsed and validated but changes nothing yet; help and startup say so. */
  readonly effective: boolean;
}

export class FlagError extends Error {}

const TYPE_NAMES: Record<FlagType, string> = {
  string: 'string',
  bool: '',
  int: 'int',
  uint16: 'uint16',
  float32: 'float32',
  duration: 'duration',
  stringSlice: 'strings',
  stringArray: 'stringArray',
};

const EXPECTED: Record<FlagType, string> = {
  string: 'a string',
  bool: 'a boolean (true or false)',
  int: 'an integer',
  uint16: 'an integer from 0 to 65535',
  float32: 'a number',
  duration: 'a duration such as 500ms, 1m30s or 2h45m',
  stringSlice: 'comma-separated strings',
  stringArray: 'a string',
};

function invalid(flag: FlagDef, raw: string): FlagError {
  return new FlagError(`invalid argument "${raw}" for "${flagLabel(flag)}" flag: expected ${EXPECTED[flag.type]}`);
}

export function flagLabel(flag: FlagDef): string {
  return flag.short ? `-${flag.short}, --${flag.name}` : `--${flag.name}`;
}

const INT = /^[+-]?\d+$/;

/** Parses one occurrence of a flag's value. Slices are parsed per occurrence and joined by the caller. */
export function parseValue(flag: FlagDef, raw: string): FlagValueOf<FlagType> {
  switch (flag.type) {
    case 'string':
      return raw;
    case 'bool':
      if (['1', 't', 'T', 'true', 'TRUE', 'True'].includes(raw)) return true;
      if (['0', 'f', 'F', 'false', 'FALSE', 'False'].includes(raw)) return false;
      throw invalid(flag, raw);
    case 'int': {
      if (!INT.test(raw)) throw invalid(flag, raw);
      const n = Number(raw);
      // pflag's int is 64-bit; past 2^53 a double would silently change the value.
      if (!Number.isSafeInteger(n)) throw invalid(flag, raw);
      return n;
    }
    case 'uint16': {
      if (!/^\+?\d+$/.test(raw) || Number(raw) > 65535) throw invalid(flag, raw);
      return Number(raw);
    }
    case 'float32': {
      const n = Number(raw);
      if (raw.trim() === '' || !Number.isFinite(n) || Math.abs(n) > 3.4028234663852886e38) throw invalid(flag, raw);
      return Math.fround(n);
    }
    case 'duration':
      try {
        return parseDuration(raw);
      } catch (e) {
        if (e instanceof DurationError) throw invalid(flag, raw);
        throw e;
      }
    case 'stringSlice':
      return raw === '' ? [] : splitCsv(raw);
    case 'stringArray':
      return [raw];
  }
}

/** pflag reads stringSlice values as CSV, so a quoted field may hold a comma. */
function splitCsv(raw: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  for (const ch of raw) {
    if (ch === '"') quoted = !quoted;
    else if (ch === ',' && !quoted) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out;
}

/** The raw default after the environment is consulted (`--namespace` from POD_NAMESPACE, ...). */
export function effectiveDefault(flag: FlagDef): string {
  if (flag.env) {
    const v = setting(flag.env);
    if (typeof v === 'string' && v !== '') return v;
    // A Boolean variable (MESH_META_DNS_CAPTURE for --redirect-dns) is the default whether set or not.
    if (typeof v === 'boolean') return String(v);
  }
  return flag.default;
}

export function defaultValue(flag: FlagDef): FlagValueOf<FlagType> {
  const raw = effectiveDefault(flag);
  if (flag.type === 'stringArray') return raw === '' ? [] : raw.split(',');
  return parseValue(flag, raw);
}

/** The `(default ...)` suffix as pflag prints it; zero values print nothing. */
export function defaultText(flag: FlagDef): string {
  const v = defaultValue(flag);
  switch (flag.type) {
    case 'string':
      return v === '' ? '' : ` (default ${JSON.stringify(v)})`;
    case 'bool':
      return v === true ? ' (default true)' : '';
    case 'int':
    case 'uint16':
    case 'float32':
      return v === 0 ? '' : ` (default ${String(v)})`;
    case 'duration':
      return v === 0n ? '' : ` (default ${formatDuration(v as bigint)})`;
    case 'stringSlice':
    case 'stringArray':
      return (v as string[]).length === 0 ? '' : ` (default [${(v as string[]).join(',')}])`;
  }
}

/** Help lines for a flag table, aligned like cobra's. */
export function flagUsages(flags: readonly FlagDef[]): string {
  const left = flags.map((f) => {
    const head = f.short ? `  -${f.short}, --${f.name}` : `      --${f.name}`;
    const type = TYPE_NAMES[f.type];
    return type ? `${head} ${type}` : head;
  });
  const width = Math.max(...left.map((l) => l.length));
  return flags
    .map((f, i) => {
      const note = f.effective ? '' : ' (accepted, not yet effective)';
      const fromEnv = f.env ? ` (from $${f.env} when set)` : '';
      return `${left[i]!.padEnd(width)}   ${f.usage}${fromEnv}${defaultText(f)}${note}`;
    })
    .join('\n');
}
