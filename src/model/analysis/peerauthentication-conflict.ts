// PeerAuthentications that apply at the same level to the same workloads (./selection-conflict.ts):
// which mode wins is then not defined by the config.
import { selectionConflicts } from './selection-conflict.js';
import type { AnalysisInput, AnalysisMessage, Analyzer } from './types.js';

export const peerAuthenticationConflict: Analyzer = {
  name: 'peerauthentication.conflict',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    return selectionConflicts({ kind: 'PeerAuthentication', codes: { wide: 'ConflictingPeerAuthentications', selected: 'ConflictingPeerAuthentications' }, selector: (pa) => pa.spec.selector?.matchLabels }, input);
  },
};
