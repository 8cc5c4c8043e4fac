// A security policy or a Sidecar whose selector matches no workload the server knows: it applies to
// nothing (a typo in a label, or a workload not deployed yet).
import type { AnyResource } from '../../api/types.js';
import { labelsMatch, type WorkloadRef } from '../selection.js';
import { formatLabels, message, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

function selectorOf(r: AnyResource): { labels: Record<string, string>; path: string } | undefined {
  switch (r.kind) {
    case 'AuthorizationPolicy':
    case 'RequestAuthentication':
    case 'PeerAuthentication':
      return r.spec.selector?.matchLabels ? { labels: r.spec.selector.matchLabels, path: 'spec.selector.matchLabels' } : undefined;
    case 'Sidecar':
      return r.spec.workloadSelector?.labels ? { labels: r.spec.workloadSelector.labels, path: 'spec.workloadSelector.labels' } : undefined;
    default:
      return undefined;
  }
}

/** Root-namespace policies select across the mesh; a Sidecar and other policies within their namespace. */
function inScope(r: AnyResource, w: WorkloadRef, rootNamespace: string): boolean {
  return w.namespace === r.metadata.namespace || (r.kind !== 'Sidecar' && r.metadata.namespace === rootNamespace);
}

export const selectorNoWorkload: Analyzer = {
  name: 'selector.workloads',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const resources: AnyResource[] = [...input.list('AuthorizationPolicy'), ...input.list('RequestAuthentication'), ...input.list('PeerAuthentication'), ...input.list('Sidecar')];
    const out: AnalysisMessage[] = [];
    for (const r of resources) {
      const sel = selectorOf(r);
      if (!sel || Object.keys(sel.labels).length === 0) continue;
      if (input.workloads.some((w) => inScope(r, w, input.rootNamespace) && labelsMatch(sel.labels, w.labels))) continue;
      const where = r.metadata.namespace === input.rootNamespace && r.kind !== 'Sidecar' ? 'in the mesh' : `in namespace ${r.metadata.namespace}`;
      out.push(message('NoMatchingWorkloadsFound', r, sel.path, `no workload ${where} matches the selector ${formatLabels(sel.labels)}; the ${r.kind} applies to nothing`));
    }
    return out;
  },
};
