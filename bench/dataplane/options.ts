// The data-plane benches' numeric options (`--seconds N`, `--rounds N`, `--concurrency N`).

/** The number after `name` on the command line, or `dflt` when `name` is absent. */
export function numberOption(name: string, dflt: number): number {
  const i = process.argv.indexOf(name);
  if (i < 0) return dflt;
  const value = Number(process.argv[i + 1]);
  if (!Number.isFinite(value)) throw new Error(`${name} needs a number, got ${JSON.stringify(process.argv[i + 1] ?? '')}`);
  return value;
}
