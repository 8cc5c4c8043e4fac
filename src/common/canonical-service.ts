// A workload's canonical service and revision, which the standard metrics label requests with:
// the injector writes them on a Pod as labels, and a proxy whose node lacks them (a VM, a process
// run by hand) derives them the same way. One rule for both ends.

export const CANONICAL_NAME_LABEL = 'service.mesh.io/canonical-name';
export const CANONICAL_REVISION_LABEL = 'service.mesh.io/canonical-revision';

/** The most a label value may hold. */
const MAX_LABEL_VALUE = 63;

/** The first label of `keys` with a non-empty value (an empty label counts as unset, as in the Go mesh's template). */
function firstLabel(labels: Readonly<Record<string, string>>, keys: readonly string[]): string | undefined {
  for (const key of keys) {
    const value = labels[key];
    if (typeof value === 'string' && value) return value;
  }
  return undefined;
}

/** Cut to a label value's length, then stripped of the separators a label value may not end or start with. */
function labelValue(value: string): string {
  return value.slice(0, MAX_LABEL_VALUE).replace(/^[-_.]+|[-_.]+$/g, '');
}

/** The canonical service name and revision of a workload `workloadName` with `labels`, as the Go mesh's injector derives them. */
export function canonicalService(labels: Readonly<Record<string, string>>, workloadName: string): { name: string; revision: string } {
  return {
    name: labelValue(firstLabel(labels, [CANONICAL_NAME_LABEL, 'app.kubernetes.io/name', 'app']) ?? workloadName),
    revision: firstLabel(labels, [CANONICAL_REVISION_LABEL, 'app.kubernetes.io/version', 'version']) ?? 'latest',
  };
}
