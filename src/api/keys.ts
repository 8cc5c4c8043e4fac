// Guards a parsed document before any validator reads it: YAML and JSON parsers make every mapping
// key an own property, `__proto__` included, and such an object changes its prototype when copied
// with Object.assign or a setter, so a document carrying that key is rejected whole. Nesting is
// bounded too, so that recursive validators and builders never run out of stack on a crafted file,
// and values must be plain data: a YAML tag such as !!set yields a Set that schemas see as empty.

import { joinPath, type Issue } from './errors.js';

/** Deeper than any resource of the API (VirtualService's opaque sub-trees included). */
export const MAX_DEPTH = 64;

/** Keys no mesh field, label or map key may have: they would be read as the object's prototype. */
const FORBIDDEN_KEYS = new Set(['__proto__']);

function isPlain(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return Array.isArray(value) || proto === Object.prototype || proto === null;
}

/** Issues of the document's keys and nesting; empty when validators may read it. */
export function checkKeys(document: unknown, base = ''): Issue[] {
  const issues: Issue[] = [];
  const pending: { value: unknown; path: string; depth: number }[] = [{ value: document, path: base, depth: 0 }];
  for (let item = pending.pop(); item !== undefined; item = pending.pop()) {
    const { value, path, depth } = item;
    if (typeof value !== 'object' || value === null) continue;
    if (!isPlain(value)) {
      issues.push({ path, message: `expected plain data (a map, a list or a scalar), got a ${value.constructor?.name ?? 'special object'}; YAML tags such as !!set, !!binary or !!timestamp are not accepted` });
      continue;
    }
    if (depth > MAX_DEPTH) {
      issues.push({ path, message: `nested deeper than ${MAX_DEPTH} levels; no resource field is` });
      continue;
    }
    const entries: [string | number, unknown][] = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
    for (const [key, child] of entries) {
      const at = joinPath(path, key);
      if (typeof key === 'string' && FORBIDDEN_KEYS.has(key)) {
        issues.push({ path: at, message: `key ${JSON.stringify(key)} is not allowed: it names the object prototype, and no field, label or map key of a resource is spelled so` });
        continue;
      }
      pending.push({ value: child, path: at, depth: depth + 1 });
    }
  }
  return issues.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
