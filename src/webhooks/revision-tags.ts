// Revision tags in the cluster, as the Go mesh's tag watcher reads them: every
// MutatingWebhookConfiguration labelled `mesh.io/tag` is a tag pointing at the revision of its
// `mesh.io/rev` label. The injector resolves `mesh.io/rev=<tag>` through them, and the caBundle
// upkeep of revision R keeps the tag configurations pointing at R.
import { compareText } from '../common/compare.js';
import { scope } from '../common/log.js';
import { collectionPath, InformerGroup, type InformerGroupOptions, type ObjectMeta, type OrchestratorClient, type ResourceType } from '../config/informer.js';
import { REVISION_LABEL, TAG_LABEL, type RevisionTagMap } from '../config/revision.js';
import type { WebhookTarget } from './ca-bundle.js';

const log = scope('validationController');

export const MUTATING_WEBHOOK_CONFIGURATIONS: ResourceType = { kind: 'MutatingWebhookConfiguration', group: 'admissionregistration.k8s.io', version: 'v1', plural: 'mutatingwebhookconfigurations' };

/** One tag configuration: its name, tag and the revision it points at. */
export interface TagConfiguration {
  readonly name: string;
  readonly tag: string;
  readonly revision: string;
}

/**
 * Tag -> revision from the tag configurations. A tag that two configurations point at different
 * revisions is mapped to '' (no revision): nobody injects for it until the conflict is resolved,
 * rather than both revisions.
 */
export function tagMap(configurations: Iterable<TagConfiguration>): Map<string, string> {
  const tags = new Map<string, string>();
  for (const c of configurations) {
    const seen = tags.get(c.tag);
    tags.set(c.tag, seen === undefined || seen === c.revision ? c.revision : '');
  }
  return tags;
}

/** The tag configuration an object is, or undefined when it is not one (no tag or no revision label). */
export function tagConfiguration(object: unknown): TagConfiguration | undefined {
  const meta = (object as { metadata?: ObjectMeta } | null)?.metadata;
  const tag = meta?.labels?.[TAG_LABEL];
  const revision = meta?.labels?.[REVISION_LABEL];
  if (!meta?.name || !tag) return undefined;
  if (!revision) {
    log.warn(`mutatingwebhookconfigurations/${meta.name}: labelled ${TAG_LABEL}=${tag} without ${REVISION_LABEL}; not a tag until it names its revision`);
    return undefined;
  }
  return { name: meta.name, tag, revision };
}

/** Watches the tag configurations; `changed` handlers run when a tag is added, moved or removed. */
export class RevisionTags {
  private readonly informers: InformerGroup;
  private readonly configurations = new Map<string, TagConfiguration>();
  private current: RevisionTagMap = new Map();
  private readonly handlers: Array<() => void> = [];
  private signature = '';

  constructor(options: InformerGroupOptions = {}) {
    this.informers = new InformerGroup(options);
    this.informers.add('MutatingWebhookConfiguration (revision tags)', collectionPath(MUTATING_WEBHOOK_CONFIGURATIONS), {
      apply: (object) => {
        const name = (object as { metadata?: ObjectMeta } | null)?.metadata?.name;
        if (!name) return undefined;
        const tag = tagConfiguration(object);
        if (tag) this.configurations.set(name, tag);
        else this.configurations.delete(name);
        this.recompute();
        return name;
      },
      remove: (object) => {
        const name = (object as { metadata?: ObjectMeta } | null)?.metadata?.name;
        if (name && this.configurations.delete(name)) this.recompute();
      },
      prune: (seen) => {
        for (const name of [...this.configurations.keys()]) if (!seen.has(name)) this.configurations.delete(name);
        this.recompute();
      },
    });
  }

  /** Resolves once the configurations have been listed. */
  start(client: OrchestratorClient): Promise<void> {
    return this.informers.start(client);
  }

  close(): Promise<void> {
    return this.informers.close();
  }

  onChange(handler: () => void): void {
    this.handlers.push(handler);
  }

  /** Tag -> revision. */
  tags(): RevisionTagMap {
    return this.current;
  }

  /** The tag configurations pointing at `revision`, for its caBundle upkeep. */
  targetsOf(revision: string): WebhookTarget[] {
    return [...this.configurations.values()]
      .filter((c) => c.revision === revision)
      .map((c) => ({ plural: 'mutatingwebhookconfigurations' as const, name: c.name }))
      .sort((a, b) => compareText(a.name, b.name));
  }

  /** Recomputes the map; handlers run only when a configuration's tag or revision changed (not on caBundle patches). */
  private recompute(): void {
    const signature = [...this.configurations.values()].map((c) => `${c.name}=${c.tag}->${c.revision}`).sort().join(',');
    if (signature === this.signature) return;
    this.signature = signature;
    this.current = tagMap(this.configurations.values());
    for (const [tag, rev] of this.current) if (rev === '') log.warn(`revision tag ${tag} is claimed by configurations pointing at different revisions; no revision injects for it until one remains`);
    log.info(`revision tags: ${this.current.size === 0 ? 'none' : [...this.current].map(([tag, rev]) => `${tag} -> ${rev || '(conflict)'}`).join(', ')}`);
    for (const h of this.handlers) h();
  }
}
