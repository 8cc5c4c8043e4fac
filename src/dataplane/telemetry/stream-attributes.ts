// Envoy's attributes of an ended stream (request.*, response.*, source.*, destination.*,
// connection.*, upstream_peer.*, downstream_peer.*, node.*, xds.*), read from its record for the
// stats filter's attribute expressions. Undefined where the stream has no such value.
import type { JsonValue } from '@bufbuild/protobuf';
import type { AttributeSource } from '../../envoy/attribute-expression.js';
import { pathOnly } from '../../envoy/request.js';
import { responseFlagsString } from '../../envoy/response-flags.js';
import { addressString, type StreamInfo } from '../access-log/record.js';
import { grpcStatus, requestHeader, responseHeader } from '../access-log/stream-facts.js';
import type { LocalNode, WorkloadMetadata } from './workload-metadata.js';

function peerField(peer: WorkloadMetadata | undefined, field: string, key: string | undefined): string | undefined {
  if (!peer) return undefined;
  switch (field) {
    case 'service':
      return peer.canonicalName;
    case 'revision':
      return peer.canonicalRevision;
    case 'labels':
      return peer.labels[key!];
    case 'namespace':
    case 'cluster':
    case 'app':
    case 'version':
    case 'workload':
    case 'name':
      return peer[field];
    default:
      return undefined;
  }
}

const text = (v: JsonValue | undefined): string | undefined => (v === undefined || v === null ? undefined : typeof v === 'string' ? v : JSON.stringify(v));

function requestField(info: StreamInfo, field: string, key: string | undefined): string | undefined {
  const r = info.request;
  if (!r) return undefined;
  switch (field) {
    case 'host':
      return r.authority;
    case 'method':
      return r.method;
    case 'path':
      return r.path;
    case 'url_path':
      return pathOnly(r.path);
    case 'query': {
      const q = r.path.indexOf('?');
      return q < 0 ? '' : r.path.slice(q + 1);
    }
    case 'scheme':
      return r.scheme;
    case 'protocol':
      return info.protocol;
    case 'id':
      return requestHeader(info, 'x-request-id');
    case 'useragent':
      return requestHeader(info, 'user-agent');
    case 'referer':
      return requestHeader(info, 'referer');
    case 'headers':
      return requestHeader(info, key!);
    default:
      return undefined;
  }
}

function responseField(info: StreamInfo, field: string, key: string | undefined): string | undefined {
  switch (field) {
    case 'code':
      return info.responseCode === 0 ? undefined : String(info.responseCode);
    case 'code_details':
      return info.responseCodeDetails;
    case 'flags':
      return responseFlagsString(info.responseFlags);
    case 'grpc_status': {
      const s = grpcStatus(info);
      return s === undefined ? undefined : String(s);
    }
    case 'headers':
      return responseHeader(info.responseHeaders, key!);
    case 'trailers':
      return responseHeader(info.responseTrailers, key!);
    default:
      return undefined;
  }
}

/** The attributes of `info` on a proxy of `node`. */
export function streamAttributes(info: StreamInfo, node: LocalNode): AttributeSource {
  return (root, field, key) => {
    switch (root) {
      case 'request':
        return requestField(info, field, key);
      case 'response':
        return responseField(info, field, key);
      case 'source':
        return field === 'port' ? String(info.downstream.directRemote.port) : addressString(info.downstream.directRemote);
      case 'destination':
        return field === 'port' ? String(info.downstream.local.port) : addressString(info.downstream.local);
      case 'connection':
        return field === 'mtls' ? String(info.downstream.peer !== undefined) : info.downstream.requestedServerName;
      case 'upstream_peer':
        return peerField(info.request?.upstreamPeer, field, key);
      case 'downstream_peer':
        return peerField(info.request?.downstreamPeer, field, key);
      case 'node':
        return field === 'id' ? node.id : field === 'cluster' ? node.cluster : text(node.metadata[key!]);
      case 'xds':
        return field === 'cluster_name' ? info.upstreamCluster : info.routeName;
      default:
        return undefined;
    }
  };
}
