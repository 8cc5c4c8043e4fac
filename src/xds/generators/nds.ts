// The DNS name table over ADS (NDS): type.googleapis.com/mesh.v1.dns.NameTable, one resource per
// proxy, for proxies whose node metadata says DNS_CAPTURE=true; any other proxy that subscribes gets
// an empty set (the Go mesh sends them nothing to resolve either).
//
// Push scope: the table is a function of the services a proxy sees, their addresses and (for headless
// services) their instances, so it is pushed by service changes, by instance changes of headless
// services, and by non-policy config changes (Sidecar, ...), as CDS is; not by other endpoint-only
// pushes or policy-only ones. A regenerated table that is unchanged is not resent (the server
// compares versions).
import { anyPack } from '@bufbuild/protobuf/wkt';
import { TypeUrl } from '../../envoy/types.js';
import { NameTableSchema } from '../../gen/mesh/v1/dns_pb.js';
import { allocatedFor } from '../../model/auto-allocate.js';
import { buildNameTable, usesAutoAllocation } from '../../networking/name-table.js';
import type { XdsResource } from '../generator.js';
import { reachesBeyondListeners, type PushTrigger } from '../push-scope.js';
import type { XdsType } from './context.js';

/** The name of the one NameTable resource a proxy receives. */
export const NAME_TABLE_RESOURCE = 'nametable';

// The table depends only on the sidecar scope (shared by the proxies of a namespace or Sidecar, and
// immutable like its snapshot, whose instances it reads), on whether the proxy takes allocated
// addresses and on its cluster (a headless service's Pod names): built and serialized once per
// scope, flag and cluster.
const perScope = new WeakMap<object, Map<string, XdsResource>>();

export const nds: XdsType = {
  typeUrl: TypeUrl.NameTable,
  pushedBy: (t: PushTrigger) => t.source === 'service' || (t.source === 'endpoints' && t.headless === true) || reachesBeyondListeners(t),
  generator: (ctx) => ({
    generate: ({ proxy: info }) => {
      const proxy = ctx.opts.proxies.of(info);
      if (!proxy.dnsCapture) return [];
      const push = ctx.opts.pushContext();
      const scope = push.sidecarScope(proxy);
      const autoAllocate = usesAutoAllocation(proxy);
      let byFlag = perScope.get(scope);
      if (!byFlag) perScope.set(scope, (byFlag = new Map()));
      const key = `${autoAllocate}|${proxy.clusterId}`;
      let resource = byFlag.get(key);
      if (!resource) {
        const table = buildNameTable({ services: scope.services, instances: (s) => push.instances(s), allocated: allocatedFor(push), autoAllocate, domain: push.domain, clusterId: proxy.clusterId });
        resource = { name: NAME_TABLE_RESOURCE, resource: anyPack(NameTableSchema, table) };
        byFlag.set(key, resource);
      }
      return [resource];
    },
  }),
};
