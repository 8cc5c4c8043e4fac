// credentialName secrets over ADS (SDS): type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret,
// for the `orch://` and `orch-gateway://` names the gateway translation writes, from the credential
// store (MESHD_ENABLE_SDS_SERVER). Only by name (no wildcard), and only Secrets of the proxy's own
// namespace (`orch-gateway://` ones only when its own Gateways reference them), to streams whose
// namespace the identity check verified (as the Go mesh serves them only to proxies with a verified
// identity): anything else is refused, logged, and gets nothing.
//
// Push scope: only credential changes. Every stream watching SDS regenerates; the server sends
// only to those whose resources changed, i.e. the proxies that watch the rotated Secret.
import { anyPack } from '@bufbuild/protobuf/wkt';
import { scope } from '../../common/log.js';
import { TypeUrl } from '../../envoy/types.js';
import { SecretSchema } from '../../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { credentialSecret, resolveCredential, verifiedCertificateReferences } from '../../security/credentials/secret.js';
import { isRouter, mergedGatewayFor } from './gateway.js';
import type { ProxyInfo, XdsResource } from '../generator.js';
import type { PushTrigger } from '../push-scope.js';
import type { XdsType } from './context.js';

const log = scope('ads');

export const sds: XdsType = {
  typeUrl: TypeUrl.Secret,
  pushedBy: (t: PushTrigger) => t.source === 'credential',
  generator: (ctx) => {
    // One warning per stream (and name): a proxy re-asking on every push is not news.
    const refused = new WeakMap<ProxyInfo, Set<string>>();
    const unverified = new WeakSet<ProxyInfo>();
    return {
      generate: ({ proxy: info, subscription }) => {
        const served = ctx.opts.credentials;
        if (!served || subscription.wildcard) return [];
        const proxy = ctx.opts.proxies.of(info);
        if (!served.verified(info)) {
          if (!unverified.has(info)) log.warn(`SDS: ${info.id} from ${info.peer} has no verified identity (plaintext port, or XDS_AUTH off): no Secrets are served to it`);
          unverified.add(info);
          return [];
        }
        const store = served.store;
        const verifiedRefs = isRouter(proxy) ? verifiedCertificateReferences(mergedGatewayFor(proxy, ctx.opts.pushContext(), ctx.opts), proxy.namespace) : new Set<string>();
        const out: XdsResource[] = [];
        for (const name of subscription.names) {
          const r = resolveCredential(name, proxy.namespace, verifiedRefs);
          if (r.kind === 'foreign') continue;
          if (r.kind === 'denied') {
            let seen = refused.get(info);
            if (!seen) refused.set(info, (seen = new Set()));
            if (!seen.has(name)) log.warn(`SDS: ${info.id} (namespace ${proxy.namespace}) asked for ${name}: refused, ${r.reason}`);
            seen.add(name);
            continue;
          }
          const secret = credentialSecret(name, r.request, (n) => store.get(r.request.namespace, n));
          if (secret) out.push({ name, resource: anyPack(SecretSchema, secret) });
        }
        return out;
      },
    };
  },
};
