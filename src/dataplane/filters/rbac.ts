// The rbac HTTP filter: the shared evaluator (envoy/rbac.ts), enforced and shadow rules.
import { RBACSchema } from '../../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { compileRbacFilter, type RbacStats } from '../../envoy/rbac.js';
import { registerHttpFilter } from './registry.js';

declare module './registry.js' {
  interface HttpFilterStatsByGroup {
    rbac: RbacStats;
  }
}

registerHttpFilter({
  schema: RBACSchema,
  compile(config, name) {
    const compiled = compileRbacFilter(config);
    return { filter: { name, decodeHeaders: (r) => compiled.decodeHeaders(r) }, stats: { name, rbac: compiled.stats } };
  },
});
