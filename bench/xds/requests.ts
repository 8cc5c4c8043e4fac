// The simulated proxies' requests (ads-clients.ts), as gRPC frames. A SotW request repeats its whole
// name list, ACKs included (an Envoy EDS ACK names every cluster: about 45 KB for 1000 of them), so
// encoding each one with `toBinary` cost the simulator 2000 x 1000 strings per EDS push, on the cores
// it shares with the server. A `NameList` encodes its resource_names entries once; a request is the
// fields before them, those bytes, and the fields after, each encoded alone: protobuf parses
// concatenated encodings as one message, and in field-number order the bytes are exactly those of
// `toBinary` of the whole request (what Envoy sends too).
import { create, toBinary, type JsonObject, type MessageInitShape } from '@bufbuild/protobuf';
import { DeltaDiscoveryRequestSchema, DiscoveryRequestSchema } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { grpcFrameOf } from '../../src/envoy/grpc-call.js';
import type { ResponseHead } from './response-reader.js';

export interface SimulatedNode {
  id: string;
  metadata: JsonObject;
}

/** A list of resource names and its DiscoveryRequest.resource_names (field 3) entries, encoded once. */
export class NameList {
  readonly bytes: Uint8Array;

  constructor(readonly names: readonly string[]) {
    this.bytes = encodeRequest({ resourceNames: [...names] });
  }
}

export const NO_NAMES = new NameList([]);

/** The requests of one protocol (gRPC frames): the first of a type (with its names), and the ACK of a response. */
export interface Protocol {
  path: string;
  subscribe(typeUrl: string, names: NameList, node?: SimulatedNode): Buffer;
  ack(r: ResponseHead, names: NameList): Buffer;
}

const SERVICE = '/envoy.service.discovery.v3.AggregatedDiscoveryService';

type RequestInit = MessageInitShape<typeof DiscoveryRequestSchema>;

function encodeRequest(init: RequestInit): Uint8Array {
  return toBinary(DiscoveryRequestSchema, create(DiscoveryRequestSchema, init));
}

/**
 * A DiscoveryRequest with `names` between `before` (fields 1-2: version_info, node) and `after`
 * (fields 4-5: type_url, response_nonce), framed.
 */
function sotwRequest(before: Pick<RequestInit, 'versionInfo' | 'node'>, names: NameList, after: Pick<RequestInit, 'typeUrl' | 'responseNonce'>): Buffer {
  return grpcFrameOf([encodeRequest(before), names.bytes, encodeRequest(after)]);
}

export const SOTW: Protocol = {
  path: `${SERVICE}/StreamAggregatedResources`,
  subscribe: (typeUrl, names, node) => sotwRequest(node ? { node } : {}, names, { typeUrl }),
  ack: (r, names) => sotwRequest({ versionInfo: r.version }, names, { typeUrl: r.typeUrl, responseNonce: r.nonce }),
};

const encodeDelta = (init: MessageInitShape<typeof DeltaDiscoveryRequestSchema>): Buffer =>
  grpcFrameOf([toBinary(DeltaDiscoveryRequestSchema, create(DeltaDiscoveryRequestSchema, init))]);

export const DELTA: Protocol = {
  path: `${SERVICE}/DeltaAggregatedResources`,
  subscribe: (typeUrl, names, node) => encodeDelta({ ...(node ? { node } : {}), typeUrl, resourceNamesSubscribe: [...names.names] }),
  ack: (r) => encodeDelta({ typeUrl: r.typeUrl, responseNonce: r.nonce }),
};
