// Turns the text of one config file into its valid resources and the rejections of the rest, with
// messages in the user-facing form (file: document N (line L): Kind/ns/name: path: expectation).

import { formatIssues, formatOrigin } from '../api/errors.js';
import { parseDocuments } from '../api/parse.js';
import { asRecord } from '../api/values.js';
import { keyOf, type AnyResource } from '../api/types.js';
import { validateResource } from '../api/validate.js';
import { keyString } from './store.js';

export interface Rejection {
  /** The document's kind when it has a string one (for the metric label), else `unknown`. */
  kind: string;
  /** One line per problem. */
  messages: string[];
}

export interface FileContent {
  resources: AnyResource[];
  rejections: Rejection[];
}

export function readResources(source: string, text: string): FileContent {
  const resources: AnyResource[] = [];
  const rejections: Rejection[] = [];
  const seen = new Map<string, number>();
  for (const doc of parseDocuments(text)) {
    const origin = { source, document: doc.index, line: doc.line };
    const where = formatOrigin(origin);
    if (doc.error !== undefined) {
      rejections.push({ kind: 'unknown', messages: [`${where}: invalid YAML: ${doc.error}`] });
      continue;
    }
    const result = validateGuarded(doc.value);
    const kind = kindOf(doc.value);
    if (!result.ok) {
      rejections.push({ kind, messages: formatIssues({ ...origin, ...(result.resource ? { resource: result.resource } : {}) }, result.issues) });
      continue;
    }
    const key = keyString(keyOf(result.resource));
    const first = seen.get(key);
    if (first !== undefined) {
      rejections.push({ kind, messages: [`${where}: ${key}: duplicate of document ${first} in the same file; the first one is used`] });
      continue;
    }
    seen.set(key, doc.index);
    resources.push(result.resource);
  }
  return { resources, rejections };
}

/**
 * validateResource, with a failure of the validator itself turned into this document's rejection:
 * one document the validators did not foresee must not stop the others of the file, nor the
 * other files, from applying.
 */
function validateGuarded(value: unknown): ReturnType<typeof validateResource> {
  try {
    return validateResource(value);
  } catch (err) {
    return { ok: false, issues: [{ path: '', message: `cannot be validated (${err instanceof Error ? err.message : String(err)})` }] };
  }
}

function kindOf(value: unknown): string {
  const kind = asRecord(value)?.['kind'];
  return typeof kind === 'string' ? kind : 'unknown';
}
