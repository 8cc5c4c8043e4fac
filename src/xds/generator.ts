// The input of the xDS server: what it asks of the rest of the control plane.
//
// As in go-control-plane, the server owns the protocol (versions, nonces, ACK/NACK, subscriptions,
// diffs) and a generator owns the content: for a connected proxy and a type URL it returns the
// proxy's resources. A push names the types that may have changed; the server regenerates only
// those, for the streams subscribed to them, and sends only what differs from what it last sent.
import type { JsonObject } from '@bufbuild/protobuf';
import type { status } from '@grpc/grpc-js';
import type { Any } from '@bufbuild/protobuf/wkt';
import type { Node } from '../gen/envoy/config/core/v3/base_pb.js';

/** A connected proxy, as identified by the first request of its stream. */
export interface ProxyInfo {
  /** node.id, e.g. `sidecar~10.0.0.1~app-1.foo~foo.svc.cluster.local`. */
  readonly id: string;
  /** node.metadata (NAMESPACE, LABELS, GENERATOR, ...). */
  readonly metadata: JsonObject;
  readonly node: Node;
  /** Unique per stream: one proxy may hold several streams (reconnects, SotW and Delta). */
  readonly connectionId: string;
  /** The gRPC peer address. */
  readonly peer: string;
  /** What the stream can authenticate with (security/ca/xds-auth.ts checks it). */
  readonly credentials?: StreamCredentials;
}

export interface StreamCredentials {
  /** The `authorization` metadata value. */
  readonly authorization?: string | undefined;
  /** DER of the client certificate TLS verified, if any. */
  readonly peerCertificate?: Buffer | undefined;
  /** The `mesh-transport` metadata the port's credentials stamped (`tls`, `plaintext`), if any. */
  readonly transport?: string | undefined;
}

export interface XdsResource {
  readonly name: string;
  /** Used in Delta xDS; the server derives one from the content when absent. */
  readonly version?: string;
  readonly resource: Any;
}

/** What a stream is subscribed to for one type. */
export interface Subscription {
  /** All resources of the type (LDS/CDS with no names, or `*`). */
  readonly wildcard: boolean;
  /** Names asked for explicitly; meaningful when not wildcard. */
  readonly names: ReadonlySet<string>;
}

export interface PushRequest {
  /** Why, for logs and pilot_push_triggers-style accounting (e.g. `config`, `endpoint`). */
  readonly reason: string;
  /** Type URLs whose resources may have changed; absent = every type. */
  readonly types?: ReadonlySet<string>;
  /** When the change behind it happened (ms since the epoch), for pilot_proxy_convergence_time. */
  readonly triggeredAt?: number;
}

export interface GenerateRequest {
  readonly proxy: ProxyInfo;
  readonly typeUrl: string;
  readonly subscription: Subscription;
  /** The push being served; absent when answering the proxy's own request. */
  readonly push?: PushRequest;
}

/**
 * Produces one type's resources for a proxy. It may return more than the subscription asks for
 * (the server keeps only the subscribed names), and it may throw: the error is logged and counted,
 * nothing is sent, and the proxy keeps its last config.
 */
export interface ResourceGenerator {
  generate(req: GenerateRequest): readonly XdsResource[] | Promise<readonly XdsResource[]>;
}

/**
 * Ends one stream (or one CSDS call) with a gRPC status; the message is the detail the peer sees.
 * Throw it from ProxyInfo hooks (e.g. to refuse an unauthorized proxy).
 */
export class XdsStreamError extends Error {
  constructor(
    readonly code: status,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Told of what each stream is given and ACKs, for config distribution tracking
 * (../status/distribution.ts). `stamp` is taken before a generation: the snapshot it reads is that
 * one or newer, so what is derived from it never claims more than the proxy has.
 */
export interface DeliveryObserver {
  stamp(): number;
  generated(connectionId: string, typeUrl: string, stamp: number, version: string): void;
  sent(connectionId: string, typeUrl: string, nonce: string, version: string): void;
  acked(connectionId: string, typeUrl: string, nonce: string): void;
}
