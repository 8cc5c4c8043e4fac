// Control-plane revisions (REVISION): several discovery servers of different revisions can run in
// one cluster. An object labelled `mesh.io/rev` belongs to that revision only; an unlabelled one is
// everyone's, as the Go mesh's `istio.io/rev` works. No revision means the default one.

export const REVISION_LABEL = 'mesh.io/rev';
export const DEFAULT_REVISION = 'default';

/** The revision a server runs as: REVISION, or `default` when unset. */
export function revisionName(revision: string | undefined): string {
  return revision || DEFAULT_REVISION;
}

/** Whether a server of `revision` takes an object with these labels (unset revision: every object). */
export function inRevision(labels: Readonly<Record<string, string>> | undefined, revision: string | undefined): boolean {
  const label = labels?.[REVISION_LABEL];
  return label === undefined || !revision || label === revision;
}

/**
 * Revision tags (`mesh.io/tag`, as the Go mesh's `istio.io/tag`): a stable name pointing at one
 * revision. A tag is a MutatingWebhookConfiguration labelled `mesh.io/tag=<tag>` and
 * `mesh.io/rev=<revision>`; namespaces and Pods labelled `mesh.io/rev=<tag>` belong to that revision.
 */
export const TAG_LABEL = 'mesh.io/tag';

/** Tag name -> revision. */
export type RevisionTagMap = ReadonlyMap<string, string>;

/** The revision a `mesh.io/rev` value names: the revision a tag of that name points at, else the value itself. */
export function resolveRevision(value: string, tags: RevisionTagMap): string {
  return tags.get(value) ?? value;
}
