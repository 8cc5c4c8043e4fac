// Turns the text of a config file into its documents, each with its 1-based index and line so that
// errors point at the right place. JSON files go through the same parser: JSON is YAML 1.2.

import { LineCounter, parseAllDocuments } from 'yaml';

export interface ParsedDocument {
  /** 1-based position among the documents of the file (empty documents are skipped but counted). */
  index: number;
  /** 1-based line where the document's content starts. */
  line: number;
  /** The plain value, when the document parsed. */
  value?: unknown;
  /** Why the document could not be parsed. */
  error?: string;
}

/**
 * Far deeper than any resource (see MAX_DEPTH in keys.ts). The parser recurses per level: a file
 * nested thousands of levels deep exhausts the stack, and near that limit V8 can abort the whole
 * process instead of throwing, so such text never reaches the parser.
 */
export const MAX_TEXT_NESTING = 256;

export function parseDocuments(text: string): ParsedDocument[] {
  const deepest = nesting(text);
  if (deepest.depth > MAX_TEXT_NESTING) {
    return [{ index: 1, line: deepest.line, error: `nested more than ${MAX_TEXT_NESTING} levels deep at line ${deepest.line}; not parsed` }];
  }
  const lineCounter = new LineCounter();
  let parsed;
  try {
    parsed = parseAllDocuments(text, { lineCounter, prettyErrors: true });
  } catch (err) {
    return [{ index: 1, line: 1, error: `cannot be parsed (${firstLine(err instanceof Error ? err.message : String(err))})` }];
  }
  // A stream-level failure (not tied to a document) yields an EmptyStream with errors.
  const documents = Array.isArray(parsed) ? parsed : [];
  const out: ParsedDocument[] = [];
  documents.forEach((doc, i) => {
    // The content's start, not the `---` marker, is where users look for the document.
    const line = lineCounter.linePos(doc.contents?.range?.[0] ?? doc.range[0]).line;
    // Warnings are unresolved tags (`!foo`) and the like: the value would not be what the user wrote.
    const problems = [...doc.errors, ...doc.warnings];
    if (problems.length > 0) {
      out.push({ index: i + 1, line, error: problems.map((e) => firstLine(e.message)).join('; ') });
      return;
    }
    try {
      const value: unknown = doc.toJS({ maxAliasCount: 100 });
      if (value !== null && value !== undefined) out.push({ index: i + 1, line, value });
    } catch (err) {
      // toJS throws for alias bombs and similar abuse; that is a bad document, not a crash.
      out.push({ index: i + 1, line, error: firstLine(err instanceof Error ? err.message : String(err)) });
    }
  });
  return out;
}

/**
 * An upper bound of the nesting of YAML text, without parsing it: open flow brackets outside
 * quotes, plus block levels (deeper indentation, and each `- ` that opens a sequence entry).
 * Over-counts at worst (e.g. brackets inside a block scalar), which only matters past the limit.
 */
function nesting(text: string): { depth: number; line: number } {
  let flow = 0;
  let quote: string | undefined;
  const indents: number[] = [];
  let deepest = { depth: 0, line: 1 };
  text.split('\n').forEach((line, i) => {
    if (flow === 0 && quote === undefined) {
      const dashes = /^( *)((?:- +)*)/.exec(line)!;
      const indent = dashes[1]!.length;
      while (indents.length > 0 && indents[indents.length - 1]! >= indent) indents.pop();
      if (line.trim() !== '' && !line.trimStart().startsWith('#')) indents.push(indent);
      for (let d = 0; d < (dashes[2]!.match(/-/g)?.length ?? 0); d++) indents.push(indent + 1 + d);
    }
    for (const ch of line) {
      if (quote !== undefined) {
        if (ch === quote) quote = undefined;
      } else if (ch === '"' || ch === "'") quote = ch;
      else if (ch === '#') break;
      else if (ch === '[' || ch === '{') flow++;
      else if ((ch === ']' || ch === '}') && flow > 0) flow--;
      if (indents.length + flow > deepest.depth) deepest = { depth: indents.length + flow, line: i + 1 };
    }
    if (quote === "'") quote = undefined;
  });
  return deepest;
}

function firstLine(message: string): string {
  return message.split('\n')[0]!.trim();
}
