// Renders the chart's templates for the subset of Helm's Go-template language they use, since Helm
// cannot run here: text with `{{- ... -}}` trimming, comments, `define`/`include` of named
// templates, `if`/`else`/`end` on `eq`/`ne`/a value, `range $x := ...`, values (`.Values.a.b`,
// `.Release.Namespace`, `$`, `$x`, `.`), string literals, and the pipeline functions `toYaml`,
// `nindent N` and `quote`. Anything else throws, naming the file and the action, so a template using
// more fails the test rather than rendering wrongly.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';

type Node =
  | { kind: 'text'; text: string }
  | { kind: 'action'; expr: string }
  | { kind: 'if'; cond: string; then: Node[]; else: Node[] }
  | { kind: 'range'; variable: string; expr: string; body: Node[] };

interface Scope {
  readonly dot: unknown;
  readonly vars: Readonly<Record<string, unknown>>;
}

export interface Release {
  readonly namespace: string;
  readonly values: Record<string, unknown>;
}

/** Splits a template into text and actions, applying the `{{-` / `-}}` whitespace trims. */
function tokens(source: string, file: string): Array<{ text: string } | { action: string }> {
  const out: Array<{ text: string } | { action: string }> = [];
  const re = /\{\{(-?)\s*([\s\S]*?)\s*(-?)\}\}/g;
  let last = 0;
  let trimNext = false;
  for (let m = re.exec(source); m; m = re.exec(source)) {
    let text = source.slice(last, m.index);
    if (trimNext) text = text.replace(/^\s+/, '');
    if (m[1]) text = text.replace(/\s+$/, '');
    out.push({ text });
    const action = m[2]!;
    if (!action.startsWith('/*')) out.push({ action });
    else if (!action.endsWith('*/')) throw new Error(`${file}: unterminated comment ${action}`);
    trimNext = m[3] === '-';
    last = re.lastIndex;
  }
  out.push({ text: trimNext ? source.slice(last).replace(/^\s+/, '') : source.slice(last) });
  return out;
}

/** Parses the tokens into a tree; `define`d templates go into `defines`. */
function parse(source: string, file: string, defines: Map<string, Node[]>): Node[] {
  const list = tokens(source, file);
  let i = 0;
  const block = (until: readonly string[]): { nodes: Node[]; end: string } => {
    const nodes: Node[] = [];
    while (i < list.length) {
      const t = list[i++]!;
      if ('text' in t) {
        if (t.text) nodes.push({ kind: 'text', text: t.text });
        continue;
      }
      const a = t.action;
      if (until.includes(a)) return { nodes, end: a };
      let m: RegExpExecArray | null;
      if ((m = /^if (.+)$/.exec(a))) {
        const then = block(['else', 'end']);
        const otherwise = then.end === 'else' ? block(['end']).nodes : [];
        nodes.push({ kind: 'if', cond: m[1]!, then: then.nodes, else: otherwise });
      } else if ((m = /^range (\$\w+) := (.+)$/.exec(a))) {
        nodes.push({ kind: 'range', variable: m[1]!, expr: m[2]!, body: block(['end']).nodes });
      } else if ((m = /^define "([\w.-]+)"$/.exec(a))) {
        defines.set(m[1]!, block(['end']).nodes);
      } else if (/^(else|end)$|^(with|template|block) /.test(a)) {
        throw new Error(`${file}: {{ ${a} }} is outside the template subset this renderer evaluates`);
      } else {
        nodes.push({ kind: 'action', expr: a });
      }
    }
    if (until.length > 0) throw new Error(`${file}: missing {{ end }}`);
    return { nodes, end: '' };
  };
  return block([]).nodes;
}

class Renderer {
  private readonly defines = new Map<string, Node[]>();
  private readonly root: Record<string, unknown>;

  constructor(release: Release) {
    this.root = { Values: release.values, Release: { Namespace: release.namespace } };
  }

  load(file: string, source: string): Node[] {
    return parse(source, file, this.defines);
  }

  render(nodes: Node[], scope: Scope, file: string): string {
    return nodes
      .map((n) => {
        if (n.kind === 'text') return n.text;
        if (n.kind === 'action') return this.output(this.pipeline(n.expr, scope, file));
        if (n.kind === 'if') return this.render(truthy(this.pipeline(n.cond, scope, file)) ? n.then : n.else, scope, file);
        const items = this.pipeline(n.expr, scope, file);
        if (items === undefined || items === null) return '';
        if (!Array.isArray(items)) throw new Error(`${file}: range over ${n.expr}, which is not a list`);
        return items.map((item) => this.render(n.body, { dot: item, vars: { ...scope.vars, [n.variable]: item } }, file)).join('');
      })
      .join('');
  }

  private output(value: unknown): string {
    if (value === undefined || value === null) return '';
    return typeof value === 'object' ? JSON.stringify(value) : String(value);
  }

  /** `a | f x | g`: each stage gets the previous result as its last argument. */
  private pipeline(expr: string, scope: Scope, file: string): unknown {
    const stages = expr.split('|').map((s) => s.trim());
    let value: unknown;
    stages.forEach((stage, i) => {
      const words = stage.match(/"[^"]*"|\S+/g) ?? [];
      value = this.call(words, i === 0 ? [] : [value], scope, file, stage);
    });
    return value;
  }

  private call(words: string[], piped: unknown[], scope: Scope, file: string, stage: string): unknown {
    const [head, ...rest] = words;
    const args = () => [...rest.map((w) => this.operand(w, scope, file)), ...piped];
    switch (head) {
      case 'eq':
      case 'ne': {
        const [a, b] = args();
        return head === 'eq' ? a === b : a !== b;
      }
      case 'toYaml':
        return stringify(args()[0]).trimEnd();
      case 'nindent': {
        const [n, text] = args();
        const pad = ' '.repeat(Number(n));
        return `\n${String(text).split('\n').map((l) => pad + l).join('\n')}`;
      }
      case 'quote':
        return JSON.stringify(String(args()[0]));
      case 'include': {
        const [name, dot] = args();
        const body = this.defines.get(String(name));
        if (!body) throw new Error(`${file}: include of undefined template ${String(name)}`);
        return this.render(body, { dot, vars: { $: dot } }, file);
      }
      default:
        if (words.length === 1 && piped.length === 0) return this.operand(head!, scope, file);
        throw new Error(`${file}: {{ ${stage} }} is outside the template subset this renderer evaluates`);
    }
  }

  /** A literal, `.`, `.A.b`, `$`, `$x` or `$x.A.b`. */
  private operand(word: string, scope: Scope, file: string): unknown {
    if (/^"[^"]*"$/.test(word)) return word.slice(1, -1);
    if (/^\d+$/.test(word)) return Number(word);
    const m = /^(\$\w*|)((?:\.\w+)*|\.)$/.exec(word);
    if (!m) throw new Error(`${file}: ${word} is outside the template subset this renderer evaluates`);
    let value: unknown = m[1] ? scope.vars[m[1]] : scope.dot;
    if (m[1] && !(m[1] in scope.vars)) throw new Error(`${file}: ${m[1]} is not defined`);
    for (const key of m[2] === '.' ? [] : m[2]!.split('.').slice(1)) {
      if (value === null || typeof value !== 'object' || !(key in value)) throw new Error(`${file}: ${word} is not set (no ${key})`);
      value = (value as Record<string, unknown>)[key];
    }
    return value;
  }

  renderFile(nodes: Node[], file: string): string {
    return this.render(nodes, { dot: this.root, vars: { $: this.root } }, file);
  }
}

function truthy(value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (value !== null && typeof value === 'object') return Object.keys(value).length > 0;
  return Boolean(value);
}

/** Every template of the chart rendered (helpers first, files in name order), as one text per file. */
export function renderChart(chartDir: string, release: Release): Array<{ file: string; text: string }> {
  const renderer = new Renderer(release);
  const dir = join(chartDir, 'templates');
  const files = readdirSync(dir).sort();
  for (const f of files.filter((f) => f.endsWith('.tpl'))) renderer.load(f, readFileSync(join(dir, f), 'utf8'));
  return files.filter((f) => f.endsWith('.yaml')).map((file) => ({ file, text: renderer.renderFile(renderer.load(file, readFileSync(join(dir, file), 'utf8')), file) }));
}

/** Values files merged as Helm merges them: maps deeply, anything else replaced. */
export function mergeValues(base: Record<string, unknown>, override: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(override)) {
    const b = out[k];
    const isMap = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === 'object' && !Array.isArray(x);
    out[k] = isMap(b) && isMap(v) ? mergeValues(b, v) : v;
  }
  return out;
}

/** The chart's objects for a release (documents that render empty are left out). */
export function renderObjects(chartDir: string, release: Release): Array<Record<string, unknown>> {
  return renderChart(chartDir, release).flatMap((f) =>
    parseAllDocuments(f.text)
      .map((d) => d.toJS() as Record<string, unknown> | null)
      .filter((d): d is Record<string, unknown> => d !== null),
  );
}
