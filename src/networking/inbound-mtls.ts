// PeerAuthentication on the inbound side: a port's plaintext chains become the chains of its mTLS
// mode, with the Go mesh's filter chain matches. STRICT: TLS only (mesh mTLS, client certificate
// required). PERMISSIVE: mesh mTLS matched on the mesh ALPNs next to plaintext (raw_buffer), and
// for TCP ports one-way TLS passed through. DISABLE: plaintext only. tls_inspector tells them apart.
import { clone, create } from '@bufbuild/protobuf';
import { ListenerFilterSchema, type FilterChain, type ListenerFilter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { FilterChainMatchSchema, FilterChainSchema } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { TlsInspectorSchema } from '../gen/envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector_pb.js';
import { pack } from '../envoy/types.js';
import type { EffectiveMtlsMode } from '../security/mtls/peer-authentication.js';
import { ALL_MESH_ALPNS, inboundMtlsSocket, MESH_CLIENT_ALPNS, MESH_HTTP_ALPNS, type InboundTlsOptions } from '../security/mtls/tls-context.js';
import { tcpProxyFilter } from './common.js';
import { BLACKHOLE_CLUSTER } from './names.js';

export const TLS_INSPECTOR_FILTER_NAME = 'envoy.filters.listener.tls_inspector';
const TLS = 'tls';
const RAW_BUFFER = 'raw_buffer';

export interface InboundMtlsOptions {
  /** The workload's mode: ports without a mode of their own and the passthrough chains take it. */
  readonly mode: EffectiveMtlsMode;
  /**
   * How the proxy terminates mesh mTLS; absent when it has no workload certificate (no SDS): its
   * STRICT ports then refuse every connection (fail closed) and the others stay plaintext.
   */
  readonly tls?: InboundTlsOptions;
}

/**
 * What a plaintext chain carries: an HTTP connection manager or a TCP proxy, either for a declared
 * protocol or as one half of a sniffed port (whose chains match http_inspector's protocols).
 */
export type ChainKind = 'http' | 'tcp' | 'sniffed-http' | 'sniffed-tcp';

interface Variant {
  readonly mtls: boolean;
  readonly transport: typeof TLS | typeof RAW_BUFFER;
  /** Replaces the chain's application protocols; undefined keeps them. */
  readonly alpn?: readonly string[];
  readonly suffix: string;
}

const MTLS = (alpn?: readonly string[]): Variant => ({ mtls: true, transport: TLS, ...(alpn ? { alpn } : {}), suffix: '_mtls' });
const PLAIN: Variant = { mtls: false, transport: RAW_BUFFER, suffix: '' };
/** One-way TLS from a client without a sidecar, proxied as bytes (TCP ports only). */
const PLAIN_TLS: Variant = { mtls: false, transport: TLS, alpn: [], suffix: '_tls' };

/** The Go mesh's filter chain match options per protocol and mode. */
function variants(kind: ChainKind, mode: EffectiveMtlsMode): Variant[] {
  if (mode === 'DISABLE') return [PLAIN];
  switch (kind) {
    case 'http':
      return mode === 'STRICT' ? [MTLS()] : [MTLS(ALL_MESH_ALPNS), PLAIN];
    case 'tcp':
      return mode === 'STRICT' ? [MTLS()] : [MTLS(ALL_MESH_ALPNS), PLAIN_TLS, PLAIN];
    case 'sniffed-http':
      return mode === 'STRICT' ? [MTLS(MESH_HTTP_ALPNS)] : [MTLS(MESH_HTTP_ALPNS), PLAIN];
    case 'sniffed-tcp':
      return mode === 'STRICT' ? [MTLS([])] : [MTLS(MESH_CLIENT_ALPNS), PLAIN, PLAIN_TLS];
  }
}

function variantChain(chain: FilterChain, kind: ChainKind, v: Variant, tls: InboundTlsOptions): FilterChain {
  const out = clone(FilterChainSchema, chain);
  out.name = `${chain.name}${v.suffix}`;
  out.filterChainMatch = chain.filterChainMatch ? clone(FilterChainMatchSchema, chain.filterChainMatch) : create(FilterChainMatchSchema);
  out.filterChainMatch.transportProtocol = v.transport;
  if (v.alpn) out.filterChainMatch.applicationProtocols = [...v.alpn];
  if (v.mtls) out.transportSocket = inboundMtlsSocket(kind === 'http' || kind === 'sniffed-http' ? 'http' : 'tcp', tls);
  return out;
}

/** A chain with the same match that refuses its connections (STRICT on a proxy that cannot terminate mTLS). */
function refusing(chain: FilterChain): FilterChain {
  const out = clone(FilterChainSchema, chain);
  out.filters = [tcpProxyFilter(BLACKHOLE_CLUSTER)];
  return out;
}

/** The chains of one port (or of the passthrough) under `mode`; without mTLS options, the plaintext chains. */
export function securedChains(chains: readonly { kind: ChainKind; chain: FilterChain }[], mode: EffectiveMtlsMode | undefined, mtls: InboundMtlsOptions | undefined): FilterChain[] {
  if (!mtls) return chains.map((c) => c.chain);
  const effective = mode ?? mtls.mode;
  if (!mtls.tls) return chains.map((c) => (effective === 'STRICT' ? refusing(c.chain) : c.chain));
  const tls = mtls.tls;
  return chains.flatMap((c) => variants(c.kind, effective).map((v) => variantChain(c.chain, c.kind, v, tls)));
}

/** Whether a listener with these modes needs tls_inspector (some chain matches on TLS). */
export function needsTlsInspector(modes: readonly (EffectiveMtlsMode | undefined)[], mtls: InboundMtlsOptions | undefined): boolean {
  return !!mtls?.tls && modes.some((m) => (m ?? mtls.mode) !== 'DISABLE');
}

export function tlsInspector(): ListenerFilter {
  return create(ListenerFilterSchema, { name: TLS_INSPECTOR_FILTER_NAME, configType: { case: 'typedConfig', value: pack(TlsInspectorSchema, {}) } });
}
