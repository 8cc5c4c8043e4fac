// The record of a connection rather than a request: a tcp_proxy connection, or one that no
// filter chain of a listener took. Its bytes are the downstream socket's, read when it is logged.
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Address } from '../../envoy/request.js';
import { ResponseFlag } from '../../envoy/response-flags.js';
import { peerIdentityOf } from '../tls/peer.js';
import type { AccessLogs } from './access-logs.js';
import { StreamInfo } from './record.js';

/** The record of a connection; `protocol` when it spoke HTTP (a request refused before it was parsed). */
export function connectionInfo(socket: Socket, source: Address, destination: Address, protocol?: string): StreamInfo {
  const tls = (socket as Partial<TLSSocket>).encrypted === true;
  return new StreamInfo(
    { socket, directRemote: source, remote: source, local: destination, requestedServerName: tls ? (socket as TLSSocket).servername || '' : '', peer: peerIdentityOf(socket) },
    undefined,
    protocol,
  );
}

/** The downstream bytes so far, into the record. */
export function readConnectionBytes(info: StreamInfo, socket: Socket): void {
  info.bytesReceived = socket.bytesRead;
  info.bytesSent = socket.bytesWritten;
}

/** A listener's line for a connection no filter chain matched, as Envoy writes it: NR, filter_chain_not_found. */
export function logUnmatchedConnection(logs: AccessLogs, socket: Socket, source: Address, destination: Address): void {
  const info = connectionInfo(socket, source, destination);
  info.setResponseFlag(ResponseFlag.NoRouteFound);
  info.responseCodeDetails = 'filter_chain_not_found';
  info.ended();
  readConnectionBytes(info, socket);
  logs.log(info);
}
