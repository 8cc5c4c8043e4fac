// gRPC status codes and the gRPC spec's mapping of an HTTP status to one: what a client makes of a
// response that is not gRPC (grpc-call.ts) and what a proxy's local reply to a gRPC request says
// (the data plane's codec and access logs).

/** The gRPC status codes the mesh produces or acts on. */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  DEADLINE_EXCEEDED: 4,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/** The gRPC status of an HTTP status, as the gRPC spec maps it (UNKNOWN when it has none). */
export function grpcStatusOfHttp(status: number): number {
  switch (status) {
    case 400:
      return GrpcStatus.INTERNAL;
    case 401:
      return GrpcStatus.UNAUTHENTICATED;
    case 403:
      return GrpcStatus.PERMISSION_DENIED;
    case 404:
      return GrpcStatus.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return GrpcStatus.UNAVAILABLE;
    default:
      return GrpcStatus.UNKNOWN;
  }
}
