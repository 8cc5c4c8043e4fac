// Merging Prometheus text expositions (the proxy's, the application's, the agent's) into one that
// a scraper accepts: one HELP and one TYPE per family, each family's samples together, no series
// twice. Plain concatenation breaks all three when two sources export the same family (e.g. both
// run prom-client's process_* metrics), and Prometheus then rejects the whole scrape.

export interface Family {
  name: string;
  help?: string;
  type?: string;
  /** Sample lines as written, in order. */
  samples: string[];
}

// Sample names a family of these types owns besides its own name.
const SUFFIXES: Record<string, readonly string[]> = {
  histogram: ['_bucket', '_sum', '_count', '_created'],
  summary: ['_sum', '_count', '_created'],
  counter: ['_total', '_created'],
};

function belongsTo(sampleName: string, f: Family): boolean {
  if (sampleName === f.name) return true;
  return (SUFFIXES[f.type ?? ''] ?? []).some((s) => sampleName === f.name + s);
}

/** The series key of a sample line: its name and label set as written. */
function seriesOf(line: string): string {
  const brace = line.indexOf('{');
  if (brace >= 0) return line.slice(0, line.indexOf('}', brace) + 1);
  return line.split(/\s/, 1)[0]!;
}

/** Families of one exposition in their order; comments other than HELP/TYPE are dropped. */
export function parseExposition(text: string): Family[] {
  const families: Family[] = [];
  let current: Family | undefined;
  const familyFor = (name: string): Family => {
    if (current?.name !== name) {
      current = { name, samples: [] };
      families.push(current);
    }
    return current;
  };
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const meta = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s+(.*))?$/.exec(line);
    if (meta) {
      const f = current?.name === meta[2] && current.samples.length === 0 ? current : familyFor(meta[2]!);
      if (meta[1] === 'HELP') f.help = meta[3] ?? '';
      else f.type = meta[3] ?? 'untyped';
      continue;
    }
    if (line.startsWith('#')) continue;
    const name = /^[^{\s]+/.exec(line)![0];
    if (!current || !belongsTo(name, current)) familyFor(name);
    current!.samples.push(line);
  }
  return families;
}

export interface MergeResult {
  text: string;
  /** Families left out because a source typed them differently from an earlier one. */
  conflicts: string[];
}

/**
 * One exposition from several, earlier sources first: a family keeps its first HELP and TYPE; a
 * later source's samples join it unless the series is already there (first wins); a family a later
 * source types differently is left out of that source, since no valid exposition could hold both.
 */
export function mergeExpositions(sources: readonly string[]): MergeResult {
  const merged = new Map<string, Family & { series: Set<string> }>();
  const conflicts: string[] = [];
  for (const text of sources) {
    for (const f of parseExposition(text)) {
      const into = merged.get(f.name);
      if (!into) {
        merged.set(f.name, { ...f, samples: [], series: new Set() });
      } else if ((into.type ?? 'untyped') !== (f.type ?? 'untyped')) {
        conflicts.push(`${f.name} (${f.type ?? 'untyped'}, already ${into.type ?? 'untyped'})`);
        continue;
      }
      const target = merged.get(f.name)!;
      for (const s of f.samples) {
        const key = seriesOf(s);
        if (target.series.has(key)) continue;
        target.series.add(key);
        target.samples.push(s);
      }
    }
  }
  const lines: string[] = [];
  for (const f of merged.values()) {
    if (f.help !== undefined) lines.push(`# HELP ${f.name} ${f.help}`);
    if (f.type !== undefined) lines.push(`# TYPE ${f.name} ${f.type}`);
    lines.push(...f.samples);
  }
  return { text: lines.length ? lines.join('\n') + '\n' : '', conflicts };
}
