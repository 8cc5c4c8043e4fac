// Envoy's retry conditions (the router's x-envoy-retry-on and x-envoy-retry-grpc-on values), shared
// by the discovery server, which refuses a VirtualService naming any other, and the proxy, which
// evaluates them (dataplane/retry-policy.ts).

/** The gRPC conditions, by the grpc-status of a trailers-only response they retry. */
export const GRPC_RETRY_CONDITIONS: ReadonlyMap<string, number> = new Map([
  ['cancelled', 1],
  ['deadline-exceeded', 4],
  ['resource-exhausted', 8],
  ['internal', 13],
  ['unavailable', 14],
]);

/** Every condition a route's retry_on may name. */
export const RETRY_CONDITIONS: ReadonlySet<string> = new Set([
  '5xx',
  'gateway-error',
  'connect-failure',
  'retriable-4xx',
  'reset',
  'reset-before-request',
  'retriable-status-codes',
  'refused-stream',
  'envoy-ratelimited',
  'retriable-headers',
  'http3-post-connect-failure',
  ...GRPC_RETRY_CONDITIONS.keys(),
]);
