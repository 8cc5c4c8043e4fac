// Several VirtualServices for the mesh (no `gateways`, or `mesh` among them) defining one host: the
// proxies see one of them, which one is not defined.
import type { VirtualService } from '../../api/types.js';
import { message, qualifiedHost, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

const boundToMesh = (vs: VirtualService) => !vs.spec.gateways || vs.spec.gateways.length === 0 || vs.spec.gateways.includes('mesh');

export const virtualServiceConflict: Analyzer = {
  name: 'virtualservice.conflict',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const byHost = new Map<string, Array<{ vs: VirtualService; index: number }>>();
    for (const vs of input.list('VirtualService').filter(boundToMesh)) {
      (vs.spec.hosts ?? []).forEach((h, index) => {
        const host = qualifiedHost(h, vs.metadata.namespace, input.domain);
        byHost.set(host, [...(byHost.get(host) ?? []), { vs, index }]);
      });
    }
    const out: AnalysisMessage[] = [];
    for (const [host, owners] of byHost) {
      if (owners.length < 2) continue;
      const names = owners.map((o) => `${o.vs.metadata.namespace}/${o.vs.metadata.name}`);
      for (const o of owners) {
        out.push(message('ConflictingMeshGatewayVirtualServiceHosts', o.vs, `spec.hosts[${o.index}]`, `host ${host} is defined by several VirtualServices for the mesh: ${names.join(', ')}`));
      }
    }
    return out;
  },
};
