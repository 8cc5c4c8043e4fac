// Whether a Pod gets a sidecar, and the per-pod overrides it may carry, as the Go mesh's injector
// decides (its annotations under our names). Pure: the Pod and its namespace's labels in, a verdict out.
import { isIP } from 'node:net';
import type { V1Pod } from '@kubernetes/client-node';
import { INTERCEPTION_MODES, type InterceptionMode } from '../model/proxy.js';
import { DEFAULT_REVISION, resolveRevision, REVISION_LABEL, type RevisionTagMap } from '../config/revision.js';

export const NAMESPACE_INJECTION_LABEL = 'mesh-injection';
export const INJECT_ANNOTATION = 'sidecar.mesh.io/inject';
export const STATUS_ANNOTATION = 'sidecar.mesh.io/status';
export const INTERCEPTION_MODE_ANNOTATION = 'sidecar.mesh.io/interceptionMode';
export const INCLUDE_INBOUND_PORTS = 'traffic.sidecar.mesh.io/includeInboundPorts';
export const EXCLUDE_INBOUND_PORTS = 'traffic.sidecar.mesh.io/excludeInboundPorts';
export const INCLUDE_OUTBOUND_IP_RANGES = 'traffic.sidecar.mesh.io/includeOutboundIPRanges';
export const EXCLUDE_OUTBOUND_IP_RANGES = 'traffic.sidecar.mesh.io/excludeOutboundIPRanges';
export const EXCLUDE_OUTBOUND_PORTS = 'traffic.sidecar.mesh.io/excludeOutboundPorts';

/** Namespaces whose Pods are never injected (the orchestrator's own). */
export const IGNORED_NAMESPACES: readonly string[] = ['kube-system', 'kube-public', 'kube-node-lease'];

/** Why a Pod is not injected; the label of sidecar_injection_skip_total. */
export type SkipReason = 'host_network' | 'ignored_namespace' | 'pod_disabled' | 'namespace_not_enabled' | 'already_injected';

export type InjectionVerdict = { inject: true } | { inject: false; reason: SkipReason; message: string };

/** An annotation a user wrote that cannot be honoured: the admission is denied naming it. */
export class InjectionError extends Error {}

function flag(value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  const v = value.toLowerCase();
  if (v === 'true' || v === 'enabled' || v === 'yes' || v === 'y') return true;
  if (v === 'false' || v === 'disabled' || v === 'no' || v === 'n') return false;
  throw new InjectionError(`${INJECT_ANNOTATION}: "${value}" is not a boolean (true or false)`);
}

/**
 * Which revision's injector a Pod belongs to, as the Go mesh's webhook selectors route it: a
 * namespace labelled `mesh-injection` is the default revision's; else the namespace's `mesh.io/rev`,
 * else the Pod's; a Pod claimed by none is the default revision's (when it opts in itself). A
 * `mesh.io/rev` value naming a revision tag means the revision the tag points at, and the default
 * revision is the one the `default` tag points at when there is one (as the Go mesh's tag watcher).
 * Returns the skip for another revision's Pod, `true` when it is claimed for ours, undefined otherwise.
 */
function revisionVerdict(pod: V1Pod, namespace: string, namespaceLabels: Readonly<Record<string, string>> | undefined, revision: string, tags: RevisionTagMap): InjectionVerdict | true | undefined {
  const skip = (message: string): InjectionVerdict => ({ inject: false, reason: 'namespace_not_enabled', message: `${message}; this injector is revision ${revision}` });
  const named = (value: string): string => {
    const target = resolveRevision(value, tags);
    return target === value ? value : `${value} (a tag pointing at ${target ? `revision ${target}` : 'no single revision'})`;
  };
  const defaultRevision = resolveRevision(DEFAULT_REVISION, tags);
  if (namespaceLabels?.[NAMESPACE_INJECTION_LABEL] !== undefined) {
    return revision === defaultRevision ? undefined : skip(`namespace ${namespace} is labelled ${NAMESPACE_INJECTION_LABEL} (the default revision's${defaultRevision === DEFAULT_REVISION ? '' : `: ${named(DEFAULT_REVISION)}`})`);
  }
  const nsRev = namespaceLabels?.[REVISION_LABEL];
  const claimed = nsRev ?? pod.metadata?.labels?.[REVISION_LABEL];
  if (claimed !== undefined) return resolveRevision(claimed, tags) === revision ? true : skip(`${nsRev !== undefined ? `namespace ${namespace}` : 'the Pod'} is labelled ${REVISION_LABEL}=${named(claimed)}`);
  return revision === defaultRevision ? undefined : skip(`neither namespace ${namespace} nor the Pod is labelled ${REVISION_LABEL} for revision ${revision}, and the default revision is ${named(DEFAULT_REVISION)}`);
}

/**
 * The decision: host-network Pods and the orchestrator's namespaces are never injected, an already
 * injected Pod is left as is (injection is idempotent), a Pod that says `sidecar.mesh.io/inject`
 * false (label first, then annotation) is not; a Pod of another revision (REVISION and its tags,
 * see revisionVerdict) is not, one labelled for ours is; then the Pod's own opt-in, else the namespace
 * label `mesh-injection=enabled`.
 */
export function injectionVerdict(pod: V1Pod, namespace: string, namespaceLabels: Readonly<Record<string, string>> | undefined, revision = DEFAULT_REVISION, tags: RevisionTagMap = new Map()): InjectionVerdict {
  const skip = (reason: SkipReason, message: string): InjectionVerdict => ({ inject: false, reason, message });
  if (pod.spec?.hostNetwork) return skip('host_network', 'the Pod uses the host network');
  if (IGNORED_NAMESPACES.includes(namespace)) return skip('ignored_namespace', `namespace ${namespace} is never injected`);
  if (pod.metadata?.annotations?.[STATUS_ANNOTATION] !== undefined) return skip('already_injected', `the Pod already carries ${STATUS_ANNOTATION}`);
  const own = flag(pod.metadata?.labels?.[INJECT_ANNOTATION]) ?? flag(pod.metadata?.annotations?.[INJECT_ANNOTATION]);
  if (own === false) return skip('pod_disabled', `${INJECT_ANNOTATION}=false on the Pod`);
  const byRevision = revisionVerdict(pod, namespace, namespaceLabels, revision, tags);
  if (byRevision === true) return { inject: true };
  if (byRevision !== undefined) return byRevision;
  if (own === true) return { inject: true };
  if (namespaceLabels?.[NAMESPACE_INJECTION_LABEL] === 'enabled') return { inject: true };
  const why = namespaceLabels === undefined ? `namespace ${namespace} is not known` : `namespace ${namespace} is not labelled ${NAMESPACE_INJECTION_LABEL}=enabled`;
  return skip('namespace_not_enabled', why);
}

/** A comma-separated port list (`*` allowed when `wildcard`), checked; '' stays ''. */
export function portList(value: string, annotation: string, wildcard: boolean): string {
  const items = value.split(',').map((p) => p.trim()).filter(Boolean);
  for (const item of items) {
    if (item === '*' && wildcard) continue;
    const n = Number(item);
    if (!/^\d+$/.test(item) || n < 1 || n > 65535) throw new InjectionError(`${annotation}: "${item}" is not a port (1-65535)${wildcard ? ' or *' : ''}`);
  }
  return items.join(',');
}

/** A comma-separated CIDR list (`*` allowed), checked; '' stays ''. */
export function cidrList(value: string, annotation: string): string {
  const items = value.split(',').map((c) => c.trim()).filter(Boolean);
  for (const item of items) {
    if (item === '*') continue;
    const [ip, bits, extra] = item.split('/');
    const family = isIP(ip ?? '');
    const max = family === 6 ? 128 : 32;
    if (family === 0 || extra !== undefined || bits === undefined || !/^\d+$/.test(bits) || Number(bits) > max) {
      throw new InjectionError(`${annotation}: "${item}" is not a CIDR range (e.g. 10.0.0.0/8) or *`);
    }
  }
  return items.join(',');
}

export function interceptionMode(value: string): InterceptionMode {
  if (!(INTERCEPTION_MODES as readonly string[]).includes(value)) {
    throw new InjectionError(`${INTERCEPTION_MODE_ANNOTATION}: "${value}" is not one of ${INTERCEPTION_MODES.join(', ')}`);
  }
  return value as InterceptionMode;
}
