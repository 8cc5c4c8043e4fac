// Sort orders the builders share: resources and names are ordered by code unit (as the Go mesh's
// string comparisons order them), never by locale, so generated config does not depend on the host.

/** Code-unit order of two strings. */
export function compareText(x: string, y: string): number {
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Resources by `namespace/name`. */
export function compareByNamespacedName(a: { readonly metadata: { readonly namespace: string; readonly name: string } }, b: { readonly metadata: { readonly namespace: string; readonly name: string } }): number {
  return compareText(`${a.metadata.namespace}/${a.metadata.name}`, `${b.metadata.namespace}/${b.metadata.name}`);
}
