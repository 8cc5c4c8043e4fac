// Client Status Discovery (envoy.service.status.v3): what each connected proxy has acked.
//
// Each stream is one ClientConfig: a proxy holding a SotW and a Delta stream, or reconnecting
// before its old stream is noticed dead, shows up once per stream, as it does in syncz.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { status, type sendUnaryData, type ServerDuplexStream, type ServerUnaryCall } from '@grpc/grpc-js';
import { ClientResourceStatus } from '../gen/envoy/admin/v3/config_dump_shared_pb.js';
import {
  ClientStatusResponseSchema,
  ClientConfig_GenericXdsConfigSchema,
  ConfigStatus,
  type ClientStatusRequest,
  type ClientStatusResponse,
} from '../gen/envoy/service/status/v3/csds_pb.js';
import type { StringMatcher } from '../gen/envoy/type/matcher/v3/string_pb.js';
import type { Connection, Watch } from './connection.js';
import { XdsStreamError } from './generator.js';

function unsupported(what: string): XdsStreamError {
  return new XdsStreamError(status.INVALID_ARGUMENT, `CSDS: ${what} is not supported; match on node_id`);
}

function fullRegex(re: string): RegExp {
  try {
    return new RegExp(`^(?:${re})$`);
  } catch {
    throw new XdsStreamError(status.INVALID_ARGUMENT, `CSDS: node_id regex ${JSON.stringify(re)} is not valid`);
  }
}

/** Envoy's StringMatcher, for node_id; a regex must match the whole value, as RE2 FullMatch does. */
export function matchString(m: StringMatcher, value: string): boolean {
  const fold = (s: string): string => (m.ignoreCase ? s.toLowerCase() : s);
  const v = fold(value);
  switch (m.matchPattern.case) {
    case 'exact':
      return v === fold(m.matchPattern.value);
    case 'prefix':
      return v.startsWith(fold(m.matchPattern.value));
    case 'suffix':
      return v.endsWith(fold(m.matchPattern.value));
    case 'contains':
      return v.includes(fold(m.matchPattern.value));
    case 'safeRegex':
      return fullRegex(m.matchPattern.value.regex).test(value);
    case 'custom':
      throw unsupported('a custom string matcher');
    case undefined:
      return true;
  }
}

function selected(conn: Connection, req: ClientStatusRequest): boolean {
  if (req.nodeMatchers.length === 0) return true;
  return req.nodeMatchers.some((nm) => {
    if (nm.nodeMetadatas.length > 0) throw unsupported('node_metadatas');
    return nm.nodeId === undefined || matchString(nm.nodeId, conn.proxy.id);
  });
}

const CONFIG_STATUS = {
  SYNCED: ConfigStatus.SYNCED,
  STALE: ConfigStatus.STALE,
  NACKED: ConfigStatus.ERROR,
  NOT_SENT: ConfigStatus.NOT_SENT,
} as const;

function ackedConfigs(conn: Connection, w: Watch, withContents: boolean): MessageInitShape<typeof ClientConfig_GenericXdsConfigSchema>[] {
  const acked = w.acked;
  if (!acked) return [];
  const nack = w.lastNack?.nonce === w.sent?.nonce ? w.lastNack : undefined;
  return [...acked.resources.values()].map((r) => ({
    typeUrl: w.typeUrl,
    name: r.name,
    // SotW versions whole responses; Delta versions each resource.
    versionInfo: conn.protocol === 'delta' ? r.version : acked.version,
    xdsConfig: withContents ? r.resource : undefined,
    lastUpdated: timestampFromDate(acked.time),
    configStatus: CONFIG_STATUS[w.syncState()],
    clientStatus: ClientResourceStatus.ACKED,
    errorState: nack && {
      lastUpdateAttempt: timestampFromDate(nack.time),
      details: nack.message,
      versionInfo: nack.rejectedVersion,
    },
  }));
}

/** The CSDS answer: one ClientConfig per selected stream, listing its acked resources. */
export function clientStatus(conns: Iterable<Connection>, req: ClientStatusRequest): ClientStatusResponse {
  const config = [];
  for (const conn of conns) {
    if (!selected(conn, req)) continue;
    config.push({
      node: conn.proxy.node,
      genericXdsConfigs: [...conn.watches.values()].flatMap((w) => ackedConfigs(conn, w, !req.excludeResourceContents)),
    });
  }
  return create(ClientStatusResponseSchema, { config });
}

/** The CSDS service's two methods over the server's live connections. */
export function csdsHandlers(connections: () => Iterable<Connection>) {
  return {
    fetchClientStatus(call: ServerUnaryCall<ClientStatusRequest, ClientStatusResponse>, callback: sendUnaryData<ClientStatusResponse>): void {
      try {
        callback(null, clientStatus(connections(), call.request));
      } catch (err) {
        callback(err instanceof XdsStreamError ? err : new XdsStreamError(status.INTERNAL, String(err)));
      }
    },
    streamClientStatus(call: ServerDuplexStream<ClientStatusRequest, ClientStatusResponse>): void {
      call.on('data', (req: ClientStatusRequest) => {
        try {
          call.write(clientStatus(connections(), req));
        } catch (err) {
          call.emit('error', err instanceof XdsStreamError ? err : new XdsStreamError(status.INTERNAL, String(err)));
        }
      });
      call.on('end', () => call.end());
    },
  };
}
