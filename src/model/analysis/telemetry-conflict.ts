// Telemetries, as the Go mesh's telemetry analyzers: several namespace-wide ones in a namespace
// (only the oldest applies), several selecting one workload (they merge in an order the config does
// not make plain), and a selector that matches no workload of its namespace.
import type { Telemetry } from '../../api/types.js';
import { labelsMatch } from '../selection.js';
import { selectionConflicts } from './selection-conflict.js';
import { formatLabels, message, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

const selector = (t: Telemetry) => t.spec.selector?.matchLabels;
const hasSelector = (t: Telemetry) => Object.keys(selector(t) ?? {}).length > 0;

export const telemetryConflict: Analyzer = {
  name: 'telemetry.conflict',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const conflicts = selectionConflicts(
      {
        kind: 'Telemetry',
        codes: { wide: 'MultipleTelemetriesWithoutWorkloadSelectors', selected: 'ConflictingTelemetryWorkloadSelectors' },
        selector,
        // targetRefs attach elsewhere (they apply to no sidecar), so they are not namespace-wide.
        wide: (t) => !hasSelector(t) && (t.spec.targetRefs?.length ?? 0) === 0,
      },
      input,
    );
    // A Telemetry selects only workloads of its own namespace, the root namespace's included.
    const unmatched = input
      .list('Telemetry')
      .filter((t) => hasSelector(t) && !input.workloads.some((w) => w.namespace === t.metadata.namespace && labelsMatch(selector(t), w.labels)))
      .map((t) => message('ReferencedResourceNotFound', t, 'spec.selector.matchLabels', `no workload in namespace ${t.metadata.namespace} matches the selector ${formatLabels(selector(t)!)}; the Telemetry applies to nothing`));
    return [...conflicts, ...unmatched];
  },
};
