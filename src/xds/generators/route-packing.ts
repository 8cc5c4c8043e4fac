// Packing a route configuration from its virtual hosts' encodings. A sidecar's configuration of a
// port holds one virtual host per visible service, and the hosts are shared objects kept across
// snapshots (sidecar.ts, `virtualHost`): a new service changes the configuration of its port in
// every scope, but only by one host. Encoding each host once (per host object) and joining the
// encodings makes re-packing those configurations a copy of bytes instead of an encoding of every
// host of every scope again.
import { create, toBinary } from '@bufbuild/protobuf';
import { AnySchema, type Any } from '@bufbuild/protobuf/wkt';
import { RouteConfigurationSchema, type RouteConfiguration } from '../../gen/envoy/config/route/v3/route_pb.js';
import type { VirtualHost } from '../../gen/envoy/config/route/v3/route_components_pb.js';
import { concatBytes } from '../cache.js';

const TYPE_URL = `type.googleapis.com/${RouteConfigurationSchema.typeName}`;

const hostEntries = new WeakMap<VirtualHost, Uint8Array>();

/** A virtual host as one encoded entry of a RouteConfiguration's `virtual_hosts`, once per host object. */
function hostEntry(host: VirtualHost): Uint8Array {
  let b = hostEntries.get(host);
  if (b === undefined) {
    b = toBinary(RouteConfigurationSchema, create(RouteConfigurationSchema, { virtualHosts: [host] }));
    hostEntries.set(host, b);
  }
  return b;
}

/**
 * The configuration packed in an Any, byte for byte what `anyPack` gives: the encoder writes fields
 * in field-number order, so `name` (1), then the `virtual_hosts` entries (2), then every other field
 * (3 and above, unknown fields last) is the canonical encoding.
 */
export function packRouteConfiguration(config: RouteConfiguration): Any {
  const head = toBinary(RouteConfigurationSchema, create(RouteConfigurationSchema, { name: config.name }));
  const rest = toBinary(RouteConfigurationSchema, { ...config, name: '', virtualHosts: [] });
  return create(AnySchema, { typeUrl: TYPE_URL, value: concatBytes([head, ...config.virtualHosts.map(hostEntry), rest]) });
}
