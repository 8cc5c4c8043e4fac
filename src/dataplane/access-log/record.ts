// One stream's record for the access logs (Envoy's StreamInfo): what the command operators read
// once the stream (an HTTP request, a TCP proxy connection, a connection no filter chain took)
// has ended. It exists only where some access log is configured; the events that fill it
// (router outcomes, local replies, timeouts, bytes) write to it through an optional reference, so
// that a stream without access logs allocates nothing and does nothing more.
import { performance } from 'node:perf_hooks';
import type { Socket } from 'node:net';
import type { LocalReply } from '../../envoy/filter.js';
import type { Address, PeerIdentity, StreamRequest } from '../../envoy/request.js';
import { normalizeIp } from '../../envoy/matchers.js';
import type { UpstreamConnection } from '../http-codec.js';
import { grpcStatusOfHttp } from '../../envoy/grpc-status.js';
import type { Endpoint } from '../upstream-pools.js';

declare module '../../envoy/request.js' {
  interface StreamRequest {
    /** The stream's access log record, when its connection manager logs (set by access-log/http-stream.ts). */
    streamInfo?: StreamInfo;
  }
}

/** A response's header map as the record keeps it: lower-case names. */
export type LoggedHeaders = Readonly<Record<string, string | string[] | number | undefined>>;

/** The downstream connection, as the address operators read it. */
export interface DownstreamInfo {
  /** The connection, for the TLS and connection id operators. */
  readonly socket: Socket | undefined;
  /** The peer of the connection. */
  readonly directRemote: Address;
  /** The client after x-forwarded-for processing (the peer for TCP). */
  readonly remote: Address;
  /** The connection's original destination when restored, else its local address. */
  readonly local: Address;
  readonly requestedServerName: string;
  readonly peer: PeerIdentity | undefined;
}

const now = (): number => performance.now();

export class StreamInfo {
  /** Wall-clock start in ms, with the fraction %START_TIME%'s %6f and %9f show. */
  readonly startEpochMs = performance.timeOrigin + now();
  private readonly start = now();
  /** Set bits of envoy/response-flags.ts. */
  responseFlags = 0;
  /** 0 until a response (Envoy's RESPONSE_CODE is 0 without one). */
  responseCode = 0;
  responseCodeDetails: string | undefined = undefined;
  connectionTerminationDetails: string | undefined = undefined;
  upstreamHost: string | undefined = undefined;
  upstreamCluster: string | undefined = undefined;
  upstreamLocalAddress: string | undefined = undefined;
  upstreamTransportFailureReason: string | undefined = undefined;
  /** The upstream TLS connection's certificate URI SANs: the server's and this proxy's ('' when none). */
  upstreamPeerUriSan = '';
  upstreamLocalUriSan = '';
  attemptCount: number | undefined = undefined;
  routeName: string | undefined = undefined;
  bytesReceived = 0;
  bytesSent = 0;
  responseHeaders: LoggedHeaders | undefined = undefined;
  responseTrailers: LoggedHeaders | undefined = undefined;
  /** The proxy reset the stream (not the client: no DC). */
  resetByProxy = false;
  /** The grpc-status a local reply gives a gRPC request (its HTTP status is then 200). */
  grpcLocalStatus: number | undefined = undefined;
  private requestEnd: number | undefined = undefined;
  private firstUpstreamRx: number | undefined = undefined;
  private end: number | undefined = undefined;

  constructor(
    readonly downstream: DownstreamInfo,
    /** The request as the filters left it (HTTP only). */
    readonly request: StreamRequest | undefined,
    /** HTTP/1.1, HTTP/2; undefined for TCP. */
    readonly protocol: string | undefined,
  ) {}

  setResponseFlag(flag: number): void {
    this.responseFlags |= flag;
  }

  hasResponseFlag(flag: number): boolean {
    return (this.responseFlags & flag) !== 0;
  }

  /** A local reply (the connection manager's, a filter's or the router's) answers the stream. */
  localReply(r: LocalReply): void {
    this.responseCode = r.status;
    this.responseCodeDetails = r.details;
    if (r.responseFlag) this.responseFlags |= r.responseFlag;
    this.responseHeaders = r.headers;
    this.grpcLocalStatus = r.grpcStatus ?? grpcStatusOfHttp(r.status);
  }

  /** The proxy resets a stream whose response had begun (an upstream reset, a timeout): its flag and details. */
  proxyReset(flag: number, details: string): void {
    this.resetByProxy = true;
    this.responseFlags |= flag;
    this.responseCodeDetails = details;
  }

  /** The endpoint an attempt goes to (the latest attempt's is logged). */
  upstreamAttempt(cluster: string, endpoint: Endpoint, attempt: number): void {
    this.upstreamCluster = cluster;
    this.upstreamHost = `${endpoint.host}:${endpoint.port}`;
    this.attemptCount = attempt;
  }

  /** The upstream connection's own end (%UPSTREAM_LOCAL_ADDRESS%), read from the socket while it is open. */
  upstreamConnection(connection: UpstreamConnection | undefined): void {
    const address = connection?.localAddress;
    if (address) this.upstreamLocalAddress = addressString({ address: normalizeIp(address), port: connection.localPort ?? 0 });
    if (connection?.getPeerCertificate) {
      this.upstreamPeerUriSan = firstUriSan(connection.getPeerCertificate().subjectaltname);
      this.upstreamLocalUriSan = firstUriSan(connection.getCertificate?.()?.subjectaltname);
    }
  }

  /** The upstream's response head arrived (on `connection`) and goes downstream. */
  upstreamResponse(status: number, headers: LoggedHeaders, connection?: UpstreamConnection): void {
    this.upstreamConnection(connection);
    this.firstUpstreamRx ??= now();
    this.responseCode = status;
    this.responseCodeDetails = 'via_upstream';
    this.responseHeaders = headers;
  }

  requestComplete(): void {
    this.requestEnd ??= now();
  }

  /** The stream ended: durations are read up to here. */
  ended(): void {
    this.end ??= now();
  }

  /** %DURATION%: ms from the start to the end (or to now, before the end). */
  get durationMs(): number {
    return Math.floor((this.end ?? now()) - this.start);
  }

  /** %REQUEST_DURATION%: ms to the request's last byte, if it arrived. */
  get requestDurationMs(): number | undefined {
    return this.requestEnd === undefined ? undefined : Math.floor(this.requestEnd - this.start);
  }

  /** %RESPONSE_DURATION%: ms to the upstream response's first byte, if one came. */
  get responseDurationMs(): number | undefined {
    return this.firstUpstreamRx === undefined ? undefined : Math.floor(this.firstUpstreamRx - this.start);
  }

  /** %RESPONSE_TX_DURATION%: ms from the upstream response's first byte to the downstream's last. */
  get responseTxDurationMs(): number | undefined {
    return this.firstUpstreamRx === undefined || this.end === undefined ? undefined : Math.floor(this.end - this.firstUpstreamRx);
  }
}

/** The first URI SAN of a subjectaltname (`URI:spiffe://..., DNS:...`), '' when none. */
export function firstUriSan(altNames: string | undefined): string {
  const uri = altNames?.split(', ').find((n) => n.startsWith('URI:'));
  return uri ? uri.slice(4) : '';
}

/** `ip:port`, as Envoy prints an address (IPv6 in brackets). */
export function addressString(a: Address): string {
  return a.address.includes(':') ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}
