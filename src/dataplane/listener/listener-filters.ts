// The listener filters, by type URL: what each one turns on for a listener. tls_inspector and
// http_inspector make the listener sniff the first bytes (sniffers.ts) before it picks a chain;
// original_dst needs nothing more here: the hand-off follows the listener's use_original_dst
// (original-dst-handoff.ts), as the mesh's listeners set both. original_src makes the listener's
// connections reach their upstreams from the client's address (original-src.ts).
import type { DescMessage } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { HttpInspectorSchema } from '../../gen/envoy/extensions/filters/listener/http_inspector/v3/http_inspector_pb.js';
import { OriginalDstSchema } from '../../gen/envoy/extensions/filters/listener/original_dst/v3/original_dst_pb.js';
import { OriginalSrcSchema } from '../../gen/envoy/extensions/filters/listener/original_src/v3/original_src_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { TlsInspectorSchema } from '../../gen/envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector_pb.js';
import { ExtensionRegistry, unpackConfig } from '../extensions.js';

/** What the listener filters of one listener ask for. */
export interface ListenerFilterNeeds {
  http: boolean;
  tls: boolean;
  /** original_src: upstream connections bind the client's address, with this SO_MARK (0: none). */
  originalSrcMark?: number;
}

export interface ListenerFilter {
  readonly schema: DescMessage;
  /** Records what the filter asks for; `config` is its typed_config at `field`. */
  apply(needs: ListenerFilterNeeds, config: Any, field: string): void;
}

const registry = new ExtensionRegistry<ListenerFilter>();

export function registerListenerFilter(filter: ListenerFilter): void {
  registry.register(filter);
}

/** The registered filter of a type URL (whatever its host part), or undefined. */
export function listenerFilterOf(typeUrl: string): ListenerFilter | undefined {
  return registry.of(typeUrl);
}

registerListenerFilter({ schema: HttpInspectorSchema, apply: (n) => (n.http = true) });
registerListenerFilter({ schema: TlsInspectorSchema, apply: (n) => (n.tls = true) });
registerListenerFilter({ schema: OriginalDstSchema, apply: () => undefined });
registerListenerFilter({
  schema: OriginalSrcSchema,
  apply: (n, config, field) => {
    const c = unpackConfig(config, OriginalSrcSchema, field);
    // Envoy does not implement bind_port either; refusing it beats silently taking another port.
    if (c.bindPort) throw new ConfigError(`${field}.bind_port`, 'binding the downstream port is not supported (Envoy does not implement it either)');
    n.originalSrcMark = c.mark;
  },
});
