// %START_TIME(format)%: Envoy formats the start time in UTC with strftime's specifiers (absl's
// FormatTime) plus its own %s (epoch seconds) and %Nf (N digits of the second's fraction; %f: 9).
// Compiled once into pieces; without a format it is Envoy's default, ISO 8601 with milliseconds.

type Piece = string | ((d: Date, epochMs: number) => string);

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const DAY_NAMES = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const MONTH_NAMES = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

const pad = (n: number, width = 2): string => String(n).padStart(width, '0');

/** The first `digits` digits of the second's fraction (nanoseconds from the fractional ms). */
function fraction(epochMs: number, digits: number): string {
  const ns = Math.floor((((epochMs % 1000) + 1000) % 1000) * 1e6);
  return pad(ns, 9).slice(0, digits);
}

const SPECIFIERS: Readonly<Record<string, (d: Date, epochMs: number) => string>> = {
  Y: (d) => String(d.getUTCFullYear()),
  y: (d) => pad(d.getUTCFullYear() % 100),
  m: (d) => pad(d.getUTCMonth() + 1),
  d: (d) => pad(d.getUTCDate()),
  e: (d) => String(d.getUTCDate()).padStart(2, ' '),
  H: (d) => pad(d.getUTCHours()),
  I: (d) => pad(((d.getUTCHours() + 11) % 12) + 1),
  p: (d) => (d.getUTCHours() < 12 ? 'AM' : 'PM'),
  M: (d) => pad(d.getUTCMinutes()),
  S: (d) => pad(d.getUTCSeconds()),
  j: (d) => pad(Math.floor((d.getTime() - Date.UTC(d.getUTCFullYear(), 0, 1)) / 86_400_000) + 1, 3),
  a: (d) => DAYS[d.getUTCDay()]!,
  A: (d) => DAY_NAMES[d.getUTCDay()]!,
  u: (d) => String(d.getUTCDay() || 7),
  w: (d) => String(d.getUTCDay()),
  b: (d) => MONTHS[d.getUTCMonth()]!,
  h: (d) => MONTHS[d.getUTCMonth()]!,
  B: (d) => MONTH_NAMES[d.getUTCMonth()]!,
  z: () => '+0000',
  Z: () => 'UTC',
  s: (_d, ms) => String(Math.floor(ms / 1000)),
  T: (d) => `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`,
  F: (d) => `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`,
  D: (d) => `${pad(d.getUTCMonth() + 1)}/${pad(d.getUTCDate())}/${pad(d.getUTCFullYear() % 100)}`,
  R: (d) => `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`,
  n: () => '\n',
  t: () => '\t',
  '%': () => '%',
};

/**
 * One specifier at `format[i]` (after its `%`): the piece and how many characters it took, or
 * undefined when it is none we know (it is then written as it stands, as strftime leaves it).
 */
function specifier(format: string, i: number): [Piece, number] | undefined {
  const one = SPECIFIERS[format[i] ?? ''];
  if (one) return [one, 1];
  // %f and %1f..%9f: the fraction of the second.
  const f = /^([1-9]?)f/.exec(format.slice(i));
  if (f) {
    const digits = f[1] ? Number(f[1]) : 9;
    return [(_d, ms) => fraction(ms, digits), f[0].length];
  }
  // absl's %E#S / %E*S: seconds with # digits of fraction (* : as many as there are), %Ez: +00:00.
  const e = /^E([0-9*])S/.exec(format.slice(i));
  if (e) {
    const digits = e[1] === '*' ? 9 : Number(e[1]);
    return [(d, ms) => (digits === 0 ? pad(d.getUTCSeconds()) : `${pad(d.getUTCSeconds())}.${fraction(ms, digits)}`), e[0].length];
  }
  if (format.startsWith('Ez', i)) return [() => '+00:00', 2];
  return undefined;
}

/** The start time formatter of a START_TIME argument ('' : Envoy's default, 2024-01-31T12:00:00.000Z). */
export function compileStartTime(format: string): (epochMs: number) => string {
  if (format === '') return (ms) => new Date(Math.floor(ms)).toISOString();
  const pieces: Piece[] = [];
  let literal = '';
  for (let i = 0; i < format.length; i++) {
    const c = format[i]!;
    const spec = c === '%' ? specifier(format, i + 1) : undefined;
    if (!spec) {
      literal += c;
      continue;
    }
    if (literal) pieces.push(literal);
    literal = '';
    pieces.push(spec[0]);
    i += spec[1];
  }
  if (literal) pieces.push(literal);
  return (ms) => {
    const d = new Date(Math.floor(ms));
    let out = '';
    for (const p of pieces) out += typeof p === 'string' ? p : p(d, ms);
    return out;
  };
}
