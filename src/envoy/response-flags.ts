// Envoy's response flags (StreamInfo's core response flags): what went wrong with a stream or a
// connection, in Envoy's order, which is the order %RESPONSE_FLAGS% joins their short names in.
// Shared so that an HTTP filter's local reply (envoy/filter.ts) can name the flag it sets.

/** The short names, in Envoy's order: a flag's bit is its index here. */
export const RESPONSE_FLAG_NAMES = [
  'LH', 'UH', 'UT', 'LR', 'UR', 'UF', 'UC', 'UO', 'NR', 'DI', 'FI', 'RL', 'UAEX', 'RLSE', 'DC', 'URX',
  'SI', 'IH', 'DPE', 'UMSDR', 'RFCF', 'NFCF', 'DT', 'UPE', 'NC', 'OM', 'DF', 'DO', 'DR',
] as const;

export type ResponseFlagName = (typeof RESPONSE_FLAG_NAMES)[number];

const bit = (name: ResponseFlagName): number => 1 << RESPONSE_FLAG_NAMES.indexOf(name);

/** A stream's flags are a set of these bits (Envoy's long names). */
export const ResponseFlag = {
  NoHealthyUpstream: bit('UH'),
  UpstreamRequestTimeout: bit('UT'),
  LocalReset: bit('LR'),
  UpstreamRemoteReset: bit('UR'),
  UpstreamConnectionFailure: bit('UF'),
  UpstreamConnectionTermination: bit('UC'),
  UpstreamOverflow: bit('UO'),
  NoRouteFound: bit('NR'),
  DelayInjected: bit('DI'),
  FaultInjected: bit('FI'),
  RateLimited: bit('RL'),
  UnauthorizedExternalService: bit('UAEX'),
  DownstreamConnectionTermination: bit('DC'),
  UpstreamRetryLimitExceeded: bit('URX'),
  StreamIdleTimeout: bit('SI'),
  DownstreamProtocolError: bit('DPE'),
  DurationTimeout: bit('DT'),
  UpstreamProtocolError: bit('UPE'),
  NoClusterFound: bit('NC'),
} as const;

/** The bit of a short name, or undefined for a name Envoy does not have. */
export function responseFlagOf(name: string): number | undefined {
  const i = (RESPONSE_FLAG_NAMES as readonly string[]).indexOf(name);
  return i < 0 ? undefined : 1 << i;
}

/** %RESPONSE_FLAGS%: the short names of the set bits, comma-joined, `-` when none. */
export function responseFlagsString(flags: number): string {
  if (flags === 0) return '-';
  let out = '';
  for (let i = 0; i < RESPONSE_FLAG_NAMES.length; i++) {
    if ((flags & (1 << i)) !== 0) out += out ? `,${RESPONSE_FLAG_NAMES[i]!}` : RESPONSE_FLAG_NAMES[i]!;
  }
  return out;
}
