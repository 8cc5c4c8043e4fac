// The listener filters, by type URL: what each one turns on for a listener. tls_inspector and
// http_inspector make the listener sniff the first bytes (sniffers.ts) before it picks a chain;
// original_dst needs nothing more here: the hand-off follows the listener's use_original_dst
// (original-dst-handoff.ts), as the mesh's listeners set both.
import type { DescMessage } from '@bufbuild/protobuf';
import { HttpInspectorSchema } from '../../gen/envoy/extensions/filters/listener/http_inspector/v3/http_inspector_pb.js';
import { OriginalDstSchema } from '../../gen/envoy/extensions/filters/listener/original_dst/v3/original_dst_pb.js';
import { TlsInspectorSchema } from '../../gen/envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector_pb.js';
import { ExtensionRegistry } from '../extensions.js';

/** What the listener filters of one listener ask for. */
export interface ListenerFilterNeeds {
  http: boolean;
  tls: boolean;
}

export interface ListenerFilter {
  readonly schema: DescMessage;
  apply(needs: ListenerFilterNeeds): void;
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
