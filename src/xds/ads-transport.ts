// The ADS server's gRPC plumbing: server options from the keepalive and size flags, the ADS
// service definition whose responses are written as pre-encoded bytes (response-writer.ts), and
// the semaphore bounding how many streams are pushed to at once (PILOT_PUSH_THROTTLE).
import type { MethodDefinition, ServerOptions } from '@grpc/grpc-js';
import { settingDefault } from '../common/env.js';
import { grpcServiceDefinition } from '../envoy/grpc-service.js';
import { AggregatedDiscoveryService } from '../gen/envoy/service/discovery/v3/ads_pb.js';
import { decodeDeltaRequest, decodeSotwRequest } from './subscriptions.js';
import { OutgoingResponse } from './response-writer.js';

/** The transport flags of the ADS server. */
export interface AdsTransportOptions {
  /** --keepaliveInterval, ms. */
  readonly keepaliveIntervalMs?: number;
  /** --keepaliveTimeout, ms. */
  readonly keepaliveTimeoutMs?: number;
  /** --keepaliveMaxServerConnectionAge, ms; beyond what a timer can hold means "never". */
  readonly maxConnectionAgeMs?: number;
  /** MESH_GPRC_MAXRECVMSGSIZE, bytes. */
  readonly maxRecvMsgSize?: number;
  /** MESH_GPRC_MAXSTREAMS. */
  readonly maxStreams?: number;
}

/** Node's timers hold at most 2^31-1 ms; larger values (the spec's ~292-year default) mean "off". */
const MAX_TIMER_MS = 2 ** 31 - 1;

export function grpcOptions(o: AdsTransportOptions): ServerOptions {
  const opts: ServerOptions = {
    // Defaults: the spec's defaults of --keepaliveInterval and --keepaliveTimeout.
    'grpc.keepalive_time_ms': o.keepaliveIntervalMs ?? 30_000,
    'grpc.keepalive_timeout_ms': o.keepaliveTimeoutMs ?? 10_000,
    'grpc.max_receive_message_length': o.maxRecvMsgSize ?? settingDefault('MESH_GPRC_MAXRECVMSGSIZE'),
    'grpc.max_concurrent_streams': o.maxStreams ?? settingDefault('MESH_GPRC_MAXSTREAMS'),
  };
  if (o.maxConnectionAgeMs !== undefined && o.maxConnectionAgeMs > 0 && o.maxConnectionAgeMs < MAX_TIMER_MS) {
    opts['grpc.max_connection_age_ms'] = o.maxConnectionAgeMs;
  }
  return opts;
}

/** A method whose responses are written as bytes already encoded. */
function preEncoded<Req, Res>(method: MethodDefinition<Req, Res>): MethodDefinition<Req, OutgoingResponse> {
  return {
    ...method,
    responseSerialize: (r) => {
      r.taken = true;
      return Buffer.from(r.bytes.buffer, r.bytes.byteOffset, r.bytes.byteLength);
    },
    responseDeserialize: (b) => new OutgoingResponse(b),
  };
}

/**
 * The ADS definition, both protocols writing pre-encoded responses; requests keep their (SotW) or
 * their subscribed (Delta) resource names as bytes (see subscriptions.ts).
 */
export function adsDefinition() {
  const ads = grpcServiceDefinition(AggregatedDiscoveryService);
  return {
    ...ads,
    streamAggregatedResources: { ...preEncoded(ads.streamAggregatedResources), requestDeserialize: (b: Buffer) => decodeSotwRequest(b) },
    deltaAggregatedResources: { ...preEncoded(ads.deltaAggregatedResources), requestDeserialize: (b: Buffer) => decodeDeltaRequest(b) },
  };
}

/** Runs at most `size` tasks at once; the others wait in arrival order. */
export class Semaphore {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(size: number) {
    this.free = Math.max(1, size);
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}
