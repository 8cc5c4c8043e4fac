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

export function parseDocuments(text: string): ParsedDocument[] {
  const lineCounter = new LineCounter();
  const parsed = parseAllDocuments(text, { lineCounter, prettyErrors: true });
  // A stream-level failure (not tied to a document) yields an EmptyStream with errors.
  const documents = Array.isArray(parsed) ? parsed : [];
  const out: ParsedDocument[] = [];
  documents.forEach((doc, i) => {
    // The content's start, not the `---` marker, is where users look for the document.
    const line = lineCounter.linePos(doc.contents?.range?.[0] ?? doc.range[0]).line;
    if (doc.errors.length > 0) {
      out.push({ index: i + 1, line, error: doc.errors.map((e) => firstLine(e.message)).join('; ') });
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

function firstLine(message: string): string {
  return message.split('\n')[0]!.trim();
}
