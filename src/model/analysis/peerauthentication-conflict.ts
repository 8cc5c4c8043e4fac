// PeerAuthentications that apply at the same level to the same workloads: several namespace-wide
// (or mesh-wide, in the root namespace) ones in one namespace, or several with selectors matching
// one workload. Which mode wins is then not defined by the config.
import type { PeerAuthentication } from '../../api/types.js';
import { labelsMatch } from '../selection.js';
import { message, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

const name = (pa: PeerAuthentication) => `${pa.metadata.namespace}/${pa.metadata.name}`;
const hasSelector = (pa: PeerAuthentication) => Object.keys(pa.spec.selector?.matchLabels ?? {}).length > 0;

export const peerAuthenticationConflict: Analyzer = {
  name: 'peerauthentication.conflict',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const out: AnalysisMessage[] = [];
    const all = input.list('PeerAuthentication');
    const wide = new Map<string, PeerAuthentication[]>();
    for (const pa of all.filter((p) => !hasSelector(p))) wide.set(pa.metadata.namespace, [...(wide.get(pa.metadata.namespace) ?? []), pa]);
    for (const [ns, list] of wide) {
      if (list.length < 2) continue;
      const level = ns === input.rootNamespace ? 'mesh-wide' : `namespace-wide in ${ns}`;
      for (const pa of list) out.push(message('ConflictingPeerAuthentications', pa, 'spec.selector', `several PeerAuthentications are ${level}: ${list.map(name).join(', ')}`));
    }
    const reported = new Set<string>();
    for (const w of input.workloads) {
      const selecting = all.filter((pa) => hasSelector(pa) && pa.metadata.namespace === w.namespace && labelsMatch(pa.spec.selector!.matchLabels, w.labels));
      if (selecting.length < 2) continue;
      for (const pa of selecting) {
        if (reported.has(name(pa))) continue;
        reported.add(name(pa));
        out.push(message('ConflictingPeerAuthentications', pa, 'spec.selector.matchLabels', `a workload in ${w.namespace} is selected by several PeerAuthentications: ${selecting.map(name).join(', ')}`));
      }
    }
    return out;
  },
};
