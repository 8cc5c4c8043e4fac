// A VirtualService route to a subset that no DestinationRule of the destination host defines: the
// route's cluster has no endpoints, requests to it fail.
import type { OpaqueObject, VirtualService } from '../../api/types.js';
import { message, qualifiedHost, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

interface Destination {
  host: string;
  subset: string;
  path: string;
}

function destinations(vs: VirtualService): Destination[] {
  const out: Destination[] = [];
  const routeLists: Array<[string, Array<OpaqueObject | { [k: string]: unknown }> | undefined]> = [
    ['http', vs.spec.http],
    ['tcp', vs.spec.tcp],
    ['tls', vs.spec.tls],
  ];
  for (const [section, routes] of routeLists) {
    (routes ?? []).forEach((r, i) => {
      const legs = Array.isArray(r.route) ? (r.route as OpaqueObject[]) : [];
      legs.forEach((leg, j) => {
        const d = leg.destination as { host?: unknown; subset?: unknown } | undefined;
        if (typeof d?.host === 'string' && typeof d.subset === 'string' && d.subset !== '') out.push({ host: d.host, subset: d.subset, path: `spec.${section}[${i}].route[${j}].destination.subset` });
      });
    });
  }
  return out;
}

export const virtualServiceSubset: Analyzer = {
  name: 'virtualservice.subset',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const subsets = new Map<string, Set<string>>();
    for (const dr of input.list('DestinationRule')) {
      const host = qualifiedHost(dr.spec.host ?? '', dr.metadata.namespace, input.domain);
      const set = subsets.get(host) ?? new Set<string>();
      for (const s of dr.spec.subsets ?? []) set.add(s.name);
      subsets.set(host, set);
    }
    const out: AnalysisMessage[] = [];
    for (const vs of input.list('VirtualService')) {
      for (const d of destinations(vs)) {
        const host = qualifiedHost(d.host, vs.metadata.namespace, input.domain);
        if (subsets.get(host)?.has(d.subset)) continue;
        out.push(message('ReferencedResourceNotFound', vs, d.path, `subset "${d.subset}" of host ${host} is not defined by any DestinationRule`));
      }
    }
    return out;
  },
};
