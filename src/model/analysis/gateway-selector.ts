// A Gateway whose selector matches no connected gateway proxy: its servers are configured nowhere.
import { labelsMatch } from '../selection.js';
import { formatLabels, message, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

export const gatewaySelector: Analyzer = {
  name: 'gateway.selector',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    return input
      .list('Gateway')
      .filter((gw) => gw.spec.selector && Object.keys(gw.spec.selector).length > 0 && !input.gateways.some((g) => labelsMatch(gw.spec.selector, g.labels)))
      .map((gw) => message('ReferencedResourceNotFound', gw, 'spec.selector', `no gateway proxy matches the selector ${formatLabels(gw.spec.selector!)}; the Gateway's servers are configured nowhere`));
  },
};
