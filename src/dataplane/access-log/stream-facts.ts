// What the access log operators and the stats filter read from a stream's record beyond its
// plain fields: headers, the connection's certificates, the gRPC status, header byte sizes.
import type { PeerCertificate, TLSSocket } from 'node:tls';
import { grpcStatusOfHttp } from '../../envoy/grpc-status.js';
import { isGrpc } from '../http-codec.js';
import type { LoggedHeaders, StreamInfo } from './record.js';

export function joined(v: string | string[] | number | undefined): string | undefined {
  return v === undefined ? undefined : Array.isArray(v) ? v.join(',') : String(v);
}

export function requestHeader(info: StreamInfo, name: string): string | undefined {
  const r = info.request;
  return r === undefined ? undefined : r.header(name);
}

export function responseHeader(headers: LoggedHeaders | undefined, name: string): string | undefined {
  return headers === undefined ? undefined : joined(headers[name]);
}

export function tlsSocket(info: StreamInfo): TLSSocket | undefined {
  const s = info.downstream.socket as Partial<TLSSocket> | undefined;
  return s?.encrypted === true ? (s as TLSSocket) : undefined;
}

/** The proxy's own certificate on a TLS connection (an object without fields when it sent none). */
export function localCertificate(info: StreamInfo): Partial<PeerCertificate> | undefined {
  return tlsSocket(info)?.getCertificate() ?? undefined;
}

/** The URI SANs of a certificate's subjectaltname (`URI:spiffe://..., DNS:...`), comma-joined. */
export function uriSans(altNames: string | undefined): string | undefined {
  if (!altNames) return undefined;
  const uris = altNames.split(', ').filter((n) => n.startsWith('URI:')).map((n) => n.slice(4));
  return uris.length > 0 ? uris.join(',') : undefined;
}

/** The gRPC status of a gRPC request's response: its trailers', its headers', else its HTTP status's, as Envoy reads it. */
export function grpcStatus(info: StreamInfo): number | undefined {
  if (!isGrpc(requestHeader(info, 'content-type'))) return undefined;
  const v = responseHeader(info.responseTrailers, 'grpc-status') ?? responseHeader(info.responseHeaders, 'grpc-status');
  if (v !== undefined && /^\d+$/.test(v)) return Number(v);
  return info.grpcLocalStatus ?? (info.responseCode === 0 ? undefined : grpcStatusOfHttp(info.responseCode));
}

/** Envoy's header map byte size: names and values, pseudo-headers included. */
export function headerBytes(headers: LoggedHeaders | undefined, extra: number): number | undefined {
  if (headers === undefined) return undefined;
  let n = extra;
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) n += k.length + String(one).length;
  }
  return n;
}

export function requestHeaderBytes(info: StreamInfo): number | undefined {
  const r = info.request;
  if (!r) return undefined;
  let n = ':method'.length + r.method.length + ':path'.length + r.path.length + ':authority'.length + r.authority.length + ':scheme'.length + r.scheme.length;
  for (const [k, vs] of r.headers.entries()) for (const v of vs) n += k.length + v.length;
  return n;
}
