// Durations in Go's syntax (`500ms`, `1m30s`, `2562047h47m16.854775807s`), because users copy flags
// and variables from the Go mesh. Nanoseconds are held as bigint: the maximum (int64 ns) does not
// fit a double exactly and must print back unchanged.
import type { Duration } from '@bufbuild/protobuf/wkt';

const NS: Record<string, bigint> = {
  ns: 1n,
  us: 1_000n,
  'µs': 1_000n,
  'μs': 1_000n,
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

export const MAX_DURATION_NS = 9_223_372_036_854_775_807n;

export class DurationError extends Error {}

/** Parses a Go duration string into nanoseconds; throws DurationError naming the problem. */
export function parseDuration(text: string): bigint {
  const input = text.trim();
  if (input === '') throw new DurationError('empty duration');
  let rest = input;
  let sign = 1n;
  if (rest[0] === '-' || rest[0] === '+') {
    if (rest[0] === '-') sign = -1n;
    rest = rest.slice(1);
  }
  if (rest === '0') return 0n;
  if (rest === '') throw new DurationError(`invalid duration "${text}"`);
  let total = 0n;
  const part = /^(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)/;
  while (rest !== '') {
    const m = part.exec(rest);
    if (!m || (m[1] === '' && (m[2] === undefined || m[2] === ''))) {
      throw new DurationError(`invalid duration "${text}" (expected a number and a unit: ns, us, ms, s, m, h)`);
    }
    const unit = NS[m[3]!]!;
    const whole = BigInt(m[1] || '0');
    const frac = m[2] ?? '';
    const fracNs = frac === '' ? 0n : (BigInt(frac) * unit) / 10n ** BigInt(frac.length);
    total += whole * unit + fracNs;
    if (total > MAX_DURATION_NS) throw new DurationError(`invalid duration "${text}" (overflows int64 nanoseconds)`);
    rest = rest.slice(m[0].length);
  }
  return sign * total;
}

/** Formats nanoseconds the way Go's time.Duration.String does (`1m0s`, `100ms`, `24h0m0s`). */
export function formatDuration(ns: bigint): string {
  if (ns === 0n) return '0s';
  const neg = ns < 0n;
  let u = neg ? -ns : ns;
  let out: string;
  if (u < NS.s!) {
    const [unit, div] = u < NS.us! ? ['ns', 1n] : u < NS.ms! ? ['µs', NS.us!] : ['ms', NS.ms!];
    out = fixed(u, div as bigint) + unit;
  } else {
    const h = u / NS.h!;
    u -= h * NS.h!;
    const m = u / NS.m!;
    u -= m * NS.m!;
    out = fixed(u, NS.s!) + 's';
    if (h > 0n || m > 0n) out = `${m}m` + out;
    if (h > 0n) out = `${h}h` + out;
  }
  return (neg ? '-' : '') + out;
}

function fixed(value: bigint, div: bigint): string {
  const whole = value / div;
  const frac = value % div;
  if (frac === 0n) return whole.toString();
  const digits = div.toString().length - 1;
  return `${whole}.${frac.toString().padStart(digits, '0').replace(/0+$/, '')}`;
}

/** The longest delay a Node timer takes (a longer one fires at once, with a warning). */
export const MAX_TIMER_MS = 2_147_483_647;

/** Milliseconds for timers; saturates at Node's timer maximum rather than overflowing. */
export function toMillis(ns: bigint): number {
  const ms = ns / NS.ms!;
  return ms > BigInt(MAX_TIMER_MS) ? MAX_TIMER_MS : Number(ms);
}

/** A protobuf Duration in whole milliseconds; `fallback` when the field is not set. */
export function durationMs(d: Duration | undefined, fallback: number): number {
  if (!d) return fallback;
  return Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6);
}

/** A protobuf Duration as a timer's delay: durationMs kept between 0 and Node's longest timer. */
export function timerMs(d: Duration | undefined, fallback: number): number {
  return Math.min(Math.max(durationMs(d, fallback), 0), MAX_TIMER_MS);
}
