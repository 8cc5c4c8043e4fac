// The proxy's extensions (listener, network and HTTP filters) by the type URL of their config,
// as Envoy finds its extensions: each one registers itself with its generated config schema.
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import { anyUnpack, type Any } from '@bufbuild/protobuf/wkt';
import { ConfigError } from '../envoy/config-error.js';
import { TYPE_URL_PREFIX, typeNameOf, typeUrlOf } from '../envoy/types.js';

export class ExtensionRegistry<T extends { readonly schema: DescMessage }> {
  private readonly byTypeUrl = new Map<string, T>();

  register(extension: T): void {
    this.byTypeUrl.set(typeUrlOf(extension.schema), extension);
  }

  /** The extension of a type URL (whatever its host part), or undefined. */
  of(typeUrl: string): T | undefined {
    return this.byTypeUrl.get(TYPE_URL_PREFIX + typeNameOf(typeUrl));
  }
}

/** A typed_config decoded with `schema`; one that does not decode is a ConfigError at `field`. */
export function unpackConfig<Desc extends DescMessage>(any: Any, schema: Desc, field: string): MessageShape<Desc> {
  const msg = anyUnpack(any, schema);
  if (!msg) throw new ConfigError(field, `cannot decode ${any.typeUrl}`);
  return msg;
}
