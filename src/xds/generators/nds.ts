// The DNS name table over ADS (NDS): type.googleapis.com/mesh.v1.dns.NameTable, one resource per
// proxy, for proxies whose node metadata says DNS_CAPTURE=true; any other proxy that subscribes gets
// an empty set (the Go mesh sends them nothing to resolve either).
//
// Push scope: the table is a function of the services a proxy sees and their addresses, so it is
// pushed by service changes and non-policy config changes (Sidecar, ...), as CDS is, and not by
// endpoint-only or policy-only pushes. A regenerated table that is unchanged is not resent (the
// server compares versions).
import { anyPack } from '@bufbuild/protobuf/wkt';
import { TypeUrl } from '../../envoy/types.js';
import { NameTableSchema } from '../../gen/mesh/v1/dns_pb.js';
import { allocatedFor } from '../../model/auto-allocate.js';
import { buildNameTable, usesAutoAllocation } from '../../networking/name-table.js';
import type { XdsResource } from '../generator.js';
import { isNonSecurityConfigChange, type PushTrigger } from '../push-scope.js';
import type { XdsType } from './context.js';

/** The name of the one NameTable resource a proxy receives. */
export const NAME_TABLE_RESOURCE = 'nametable';

// The table depends only on the sidecar scope (shared by the proxies of a namespace or Sidecar, and
// immutable like its snapshot) and on whether the proxy takes allocated addresses: built and
// serialized once per scope and flag.
const perScope = new WeakMap<object, Map<boolean, XdsResource>>();

export const nds: XdsType = {
  typeUrl: TypeUrl.NameTable,
  pushedBy: (t: PushTrigger) => t.source === 'service' || isNonSecurityConfigChange(t),
  generator: (ctx) => ({
    generate: ({ proxy: info }) => {
      const proxy = ctx.opts.proxies.of(info);
      if (!proxy.dnsCapture) return [];
      const push = ctx.opts.pushContext();
      const scope = push.sidecarScope(proxy);
      const autoAllocate = usesAutoAllocation(proxy);
      let byFlag = perScope.get(scope);
      if (!byFlag) perScope.set(scope, (byFlag = new Map()));
      let resource = byFlag.get(autoAllocate);
      if (!resource) {
        const table = buildNameTable({ services: scope.services, allocated: allocatedFor(push), autoAllocate, domain: push.domain });
        resource = { name: NAME_TABLE_RESOURCE, resource: anyPack(NameTableSchema, table) };
        byFlag.set(autoAllocate, resource);
      }
      return [resource];
    },
  }),
};
