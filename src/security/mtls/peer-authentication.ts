// PeerAuthentication resolution, pure: which mutual TLS mode a workload's inbound ports take. The
// Go mesh's precedence: a policy selecting the workload beats its namespace's selector-less policy,
// which beats the root namespace's selector-less policy (mesh-wide); UNSET at a level inherits the
// level below, and the mesh default is PERMISSIVE. Port-level modes exist only on selecting
// policies and override the workload's mode for that port (UNSET there inherits it too).
import type { MtlsMode, PeerAuthentication } from '../../api/types.js';
import { labelsMatch, type WorkloadRef } from '../../model/selection.js';

/** A mode after inheritance: what the inbound chains of a port are built for. */
export type EffectiveMtlsMode = Exclude<MtlsMode, 'UNSET'>;

export const MESH_DEFAULT_MTLS_MODE: EffectiveMtlsMode = 'PERMISSIVE';

export interface WorkloadMtls {
  /** The mode of every port without a port-level setting. */
  readonly mode: EffectiveMtlsMode;
  /** Port-level modes of the selecting policy, by port number. */
  readonly ports: Readonly<Record<number, EffectiveMtlsMode>>;
  /** The policies that decided, most specific last (`ns/name`), for debug output and notices. */
  readonly from: readonly string[];
}

const hasSelector = (pa: PeerAuthentication) => Object.keys(pa.spec.selector?.matchLabels ?? {}).length > 0;

/**
 * Of several policies at one level, the oldest (creation time, then namespace/name) decides, as in
 * the Go mesh; the config analyzer reports such conflicts (MSH0113).
 */
function oldest(policies: readonly PeerAuthentication[]): PeerAuthentication | undefined {
  const key = (pa: PeerAuthentication) => [pa.metadata.creationTimestamp ? Date.parse(pa.metadata.creationTimestamp) : Number.MAX_SAFE_INTEGER, `${pa.metadata.namespace}/${pa.metadata.name}`] as const;
  return [...policies].sort((a, b) => {
    const [ta, na] = key(a);
    const [tb, nb] = key(b);
    return ta - tb || (na < nb ? -1 : na > nb ? 1 : 0);
  })[0];
}

const inherit = (mode: MtlsMode | undefined, below: EffectiveMtlsMode): EffectiveMtlsMode => (mode && mode !== 'UNSET' ? mode : below);

/** The mesh-wide and the namespace-wide policy of a namespace (selector-less ones). */
function namespaceLevels(namespace: string, policies: readonly PeerAuthentication[], rootNamespace: string) {
  const wide = policies.filter((p) => !hasSelector(p));
  const mesh = oldest(wide.filter((p) => p.metadata.namespace === rootNamespace));
  const ns = namespace === rootNamespace ? undefined : oldest(wide.filter((p) => p.metadata.namespace === namespace));
  return { mesh, ns };
}

const ref = (pa: PeerAuthentication) => `${pa.metadata.namespace}/${pa.metadata.name}`;

/** The modes of a workload's inbound ports, from every PeerAuthentication in its namespace and the root namespace. */
export function workloadMtls(workload: WorkloadRef, policies: readonly PeerAuthentication[], rootNamespace: string): WorkloadMtls {
  const { mesh, ns } = namespaceLevels(workload.namespace, policies, rootNamespace);
  const selecting = oldest(policies.filter((p) => hasSelector(p) && p.metadata.namespace === workload.namespace && labelsMatch(p.spec.selector!.matchLabels, workload.labels)));
  let mode = MESH_DEFAULT_MTLS_MODE;
  const from: string[] = [];
  for (const pa of [mesh, ns, selecting]) {
    if (!pa) continue;
    from.push(ref(pa));
    mode = inherit(pa.spec.mtls?.mode, mode);
  }
  const ports: Record<number, EffectiveMtlsMode> = {};
  for (const [port, setting] of Object.entries(selecting?.spec.portLevelMtls ?? {})) ports[Number(port)] = inherit(setting.mode, mode);
  return { mode, ports, from };
}

export function portMtlsMode(m: WorkloadMtls, port: number): EffectiveMtlsMode {
  return m.ports[port] ?? m.mode;
}

/**
 * What a client infers about a service's servers without looking at each workload, as the Go
 * mesh's auto mTLS does: the namespace-wide (else mesh-wide) mode, PERMISSIVE when neither says.
 */
export function namespaceMtlsMode(namespace: string, policies: readonly PeerAuthentication[], rootNamespace: string): EffectiveMtlsMode {
  const { mesh, ns } = namespaceLevels(namespace, policies, rootNamespace);
  return inherit(ns?.spec.mtls?.mode, inherit(mesh?.spec.mtls?.mode, MESH_DEFAULT_MTLS_MODE));
}
