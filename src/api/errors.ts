// Validation findings and how they are shown to users: every message names where the resource came
// from (file or object), the document, `kind/namespace/name`, the field path and what is expected.

/** One finding: `path` is a field path such as `spec.rules[0].when[1].key`. */
export interface Issue {
  path: string;
  message: string;
}

/** Where a resource came from, for messages. All parts are optional: a webhook has no file. */
export interface Origin {
  /** A file path, or a description such as `admission request 1234`. */
  source?: string;
  /** 1-based index of the document within a multi-document file. */
  document?: number;
  /** 1-based line where that document starts. */
  line?: number;
  /** `Kind/namespace/name` when known. */
  resource?: string;
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** Renders path segments as `a.b[0]["label/with.dots"]`. */
export function formatPath(segments: readonly (string | number)[]): string {
  let out = '';
  for (const segment of segments) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (IDENTIFIER.test(segment)) out += out === '' ? segment : `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out;
}

export function joinPath(base: string, segment: string | number): string {
  if (typeof segment === 'number') return `${base}[${segment}]`;
  if (!IDENTIFIER.test(segment)) return `${base}[${JSON.stringify(segment)}]`;
  return base === '' ? segment : `${base}.${segment}`;
}

export function formatOrigin(origin: Origin): string {
  const parts: string[] = [];
  if (origin.source !== undefined) parts.push(origin.source);
  if (origin.document !== undefined) {
    parts.push(origin.line === undefined ? `document ${origin.document}` : `document ${origin.document} (line ${origin.line})`);
  }
  if (origin.resource !== undefined) parts.push(origin.resource);
  return parts.join(': ');
}

/** One line per issue, each prefixed with the origin. */
export function formatIssues(origin: Origin, issues: readonly Issue[]): string[] {
  const prefix = formatOrigin(origin);
  return issues.map((issue) => {
    const body = issue.path === '' ? issue.message : `${issue.path}: ${issue.message}`;
    return prefix === '' ? body : `${prefix}: ${body}`;
  });
}

/** Short, unambiguous rendering of a user value for messages. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'string') return JSON.stringify(value);
  return String(value);
}
