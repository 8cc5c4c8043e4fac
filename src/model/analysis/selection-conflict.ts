// Resources of one kind that apply at the same level to the same workloads: several namespace-wide
// (mesh-wide, in the root namespace) ones in a namespace, or several with selectors matching one
// workload. Which one wins is then not defined by the config. PeerAuthentication and Telemetry.
import type { Kind, ResourceOf } from '../../api/types.js';
import { labelsMatch } from '../selection.js';
import type { CodeName } from './codes.js';
import { message, type AnalysisInput, type AnalysisMessage } from './types.js';

export interface SelectionConflict<K extends Kind> {
  readonly kind: K;
  /** One code for both cases, or one per case (namespace-wide, selected workload). */
  readonly codes: { readonly wide: CodeName; readonly selected: CodeName };
  readonly selector: (r: ResourceOf<K>) => Readonly<Record<string, string>> | undefined;
  /** A namespace-wide one; default: no selector labels. */
  readonly wide?: (r: ResourceOf<K>) => boolean;
}

const name = (r: { metadata: { namespace: string; name: string } }) => `${r.metadata.namespace}/${r.metadata.name}`;

export function selectionConflicts<K extends Kind>(c: SelectionConflict<K>, input: AnalysisInput): AnalysisMessage[] {
  const out: AnalysisMessage[] = [];
  const all = input.list(c.kind);
  const selects = (r: ResourceOf<K>) => Object.keys(c.selector(r) ?? {}).length > 0;
  const wide = new Map<string, ResourceOf<K>[]>();
  for (const r of all.filter(c.wide ?? ((r) => !selects(r)))) wide.set(r.metadata.namespace, [...(wide.get(r.metadata.namespace) ?? []), r]);
  for (const [ns, list] of wide) {
    if (list.length < 2) continue;
    const level = ns === input.rootNamespace ? 'mesh-wide' : `namespace-wide in ${ns}`;
    for (const r of list) out.push(message(c.codes.wide, r, 'spec.selector', `several ${c.kind}s are ${level}: ${list.map(name).join(', ')}`));
  }
  const reported = new Set<string>();
  for (const w of input.workloads) {
    const selecting = all.filter((r) => selects(r) && r.metadata.namespace === w.namespace && labelsMatch(c.selector(r), w.labels));
    if (selecting.length < 2) continue;
    for (const r of selecting) {
      if (reported.has(name(r))) continue;
      reported.add(name(r));
      out.push(message(c.codes.selected, r, 'spec.selector.matchLabels', `a workload in ${w.namespace} is selected by several ${c.kind}s: ${selecting.map(name).join(', ')}`));
    }
  }
  return out;
}
