// xDS type URLs, the protobuf registry of every generated Envoy file, and Any/JSON helpers.
//
// The registry exists because an Envoy config nests google.protobuf.Any everywhere (resources in a
// DiscoveryResponse, typed_config of every filter): unpacking an Any by its type URL, and writing
// or reading Envoy's JSON (`{"@type": ..., ...}`), both need every message the config may contain.
import {
  create,
  createRegistry,
  fromJson,
  toJson,
  type DescMessage,
  type JsonValue,
  type Message,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import {
  anyPack,
  anyUnpack,
  file_google_protobuf_any,
  file_google_protobuf_duration,
  file_google_protobuf_empty,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  file_google_protobuf_wrappers,
  type Any,
} from '@bufbuild/protobuf/wkt';
import { allFiles } from '../gen/files.js';

export const TYPE_URL_PREFIX = 'type.googleapis.com/';

/** Type URLs of the resources the discovery server serves. */
export const TypeUrl = {
  Listener: `${TYPE_URL_PREFIX}envoy.config.listener.v3.Listener`,
  RouteConfiguration: `${TYPE_URL_PREFIX}envoy.config.route.v3.RouteConfiguration`,
  Cluster: `${TYPE_URL_PREFIX}envoy.config.cluster.v3.Cluster`,
  ClusterLoadAssignment: `${TYPE_URL_PREFIX}envoy.config.endpoint.v3.ClusterLoadAssignment`,
  Secret: `${TYPE_URL_PREFIX}envoy.extensions.transport_sockets.tls.v3.Secret`,
  ScopedRouteConfiguration: `${TYPE_URL_PREFIX}envoy.config.route.v3.ScopedRouteConfiguration`,
  VirtualHost: `${TYPE_URL_PREFIX}envoy.config.route.v3.VirtualHost`,
  ExtensionConfig: `${TYPE_URL_PREFIX}envoy.config.core.v3.TypedExtensionConfig`,
  /** The mesh's DNS name table (proto/mesh/v1/dns.proto), for DNS_CAPTURE proxies. */
  NameTable: `${TYPE_URL_PREFIX}mesh.v1.dns.NameTable`,
} as const;
export type TypeUrl = (typeof TypeUrl)[keyof typeof TypeUrl];

/**
 * Not a resource: the agent's report of its workload's health (WorkloadGroup probes), sent as a
 * request of this type on the ADS stream, healthy without error_detail, unhealthy with one (its
 * message says why). The Go mesh's agent sends the same report as `istio.v1.HealthInformation`.
 */
export const HEALTH_INFO_TYPE_URL = `${TYPE_URL_PREFIX}mesh.v1.HealthInformation`;

/** What a HealthInformation request says: the agent sends it, the discovery server takes it. */
export interface HealthReport {
  readonly healthy: boolean;
  /** Why not, when unhealthy: what failed, as a user reads it. */
  readonly message?: string;
}

/** The short xDS names used in metric names and labels (pilot_xds_lds_reject, {type:'cds'}). */
const SHORT_NAMES: ReadonlyMap<string, string> = new Map([
  [TypeUrl.Listener, 'lds'],
  [TypeUrl.RouteConfiguration, 'rds'],
  [TypeUrl.Cluster, 'cds'],
  [TypeUrl.ClusterLoadAssignment, 'eds'],
  [TypeUrl.Secret, 'sds'],
  [TypeUrl.ScopedRouteConfiguration, 'srds'],
  [TypeUrl.VirtualHost, 'vhds'],
  [TypeUrl.ExtensionConfig, 'ecds'],
  [TypeUrl.NameTable, 'nds'],
]);

/** `lds`, `rds`, ... for a known type URL; otherwise the message name after the last dot. */
export function shortTypeName(typeUrl: string): string {
  return SHORT_NAMES.get(typeUrl) ?? messageNameOf(typeUrl);
}

/**
 * In SotW, a request with no resource names for these types means "everything" (wildcard); the
 * other types are only ever sent by name (RDS, EDS, SDS).
 */
export function isWildcardType(typeUrl: string): boolean {
  return typeUrl === TypeUrl.Listener || typeUrl === TypeUrl.Cluster || typeUrl === TypeUrl.NameTable;
}

export function typeUrlOf(schema: DescMessage): string {
  return TYPE_URL_PREFIX + schema.typeName;
}

/** The message's full name in a type URL (whatever the host part), as error messages name it. */
export function typeNameOf(typeUrl: string): string {
  return typeUrl.slice(typeUrl.lastIndexOf('/') + 1);
}

/** The message name after the last dot (`Listener` for LDS), as the config dumps key it. */
export function messageNameOf(typeUrl: string): string {
  return typeUrl.slice(typeUrl.lastIndexOf('.') + 1);
}

/** Every generated Envoy/xds/udpa file plus the well-known types an Any or JSON may refer to. */
export const registry = createRegistry(
  ...allFiles,
  file_google_protobuf_any,
  file_google_protobuf_duration,
  file_google_protobuf_empty,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  file_google_protobuf_wrappers,
);

/** Creates a message of `schema` from `init` and packs it into an Any. */
export function pack<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Any {
  return anyPack(schema, create(schema, init));
}

/** Unpacks an Any that must hold `schema`; throws if it holds another type (a caller bug). */
export function unpack<Desc extends DescMessage>(any: Any, schema: Desc): MessageShape<Desc> {
  const msg = anyUnpack(any, schema);
  if (msg === undefined) {
    throw new Error(`Any holds ${any.typeUrl}, expected ${typeUrlOf(schema)}`);
  }
  return msg;
}

/** Unpacks an Any of any registered type; throws if the type URL is not in the registry. */
export function unpackAny(any: Any): Message {
  const msg = anyUnpack(any, registry);
  if (msg === undefined) {
    throw new Error(`Any holds ${any.typeUrl}, which is not a known Envoy type`);
  }
  return msg;
}

/**
 * Envoy's JSON: proto3 JSON with Any as `{"@type": ...}`, and field names as in the .proto
 * (snake_case), which is what Envoy's config_dump prints. Envoy reads both spellings.
 */
export function toEnvoyJson<Desc extends DescMessage>(schema: Desc, msg: MessageShape<Desc>): JsonValue {
  return toJson(schema, msg, { registry, useProtoFieldName: true });
}

/** Parses Envoy JSON (either field-name spelling); rejects unknown fields, as Envoy does. */
export function fromEnvoyJson<Desc extends DescMessage>(schema: Desc, json: JsonValue): MessageShape<Desc> {
  return fromJson(schema, json, { registry });
}
