// Which workload a Pod belongs to, for the labels of the standard metrics (requests_total's
// *_workload, *_canonical_service, *_canonical_revision): the agent sends MESH_META_WORKLOAD_NAME
// and MESH_META_OWNER as the node's WORKLOAD_NAME and OWNER, and the canonical labels reach its
// node LABELS through the downward-API labels file. As the Go mesh's injector, the workload is
// guessed from the Pod's controlling owner and the labels its controllers put on it: the
// orchestrator gives the webhook only the Pod, and looking owners up would cost a read per Pod.
import type { V1EnvVar, V1Pod } from '@kubernetes/client-node';
import { CANONICAL_NAME_LABEL, CANONICAL_REVISION_LABEL, canonicalService } from '../common/canonical-service.js';

/** Set by the user to name the workload where the heuristics would not (MESH_META_WORKLOAD_NAME only). */
export const WORKLOAD_NAME_LABEL = 'service.mesh.io/workload-name';

/** The controllers' own labels that tie a Pod to the object above its controller. */
const TEMPLATE_HASH_LABEL = 'pod-template-hash';
const ROLLOUT_HASH_LABEL = 'rollouts-pod-template-hash';
const DEPLOYMENT_CONFIG_LABEL = 'deploymentconfig';
/** A CronJob names its Jobs `<cronjob>-<scheduled time in minutes>`: 8 to 10 digits. */
const CRON_JOB_NAME = /^(.+)-\d{8,10}$/;

export interface WorkloadMeta {
  readonly name: string;
  readonly namespace: string;
  readonly kind: string;
  readonly apiVersion: string;
}

interface ControllerRef {
  readonly apiVersion: string;
  readonly kind: string;
  readonly name: string;
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/** The owner reference marked as controller, read defensively: the object is the request's JSON. */
function controllerOf(pod: V1Pod): ControllerRef | undefined {
  const refs: unknown = pod.metadata?.ownerReferences;
  if (!Array.isArray(refs)) return undefined;
  for (const ref of refs as unknown[]) {
    if (typeof ref !== 'object' || ref === null) continue;
    const r = ref as Record<string, unknown>;
    if (r['controller'] === true) return { apiVersion: str(r['apiVersion']), kind: str(r['kind']), name: str(r['name']) };
  }
  return undefined;
}

/** The owner above a ReplicaSet named `<owner>-<hash>`: undefined unless the name ends with the Pod's hash label. */
function withoutHash(name: string, hash: string | undefined): string | undefined {
  if (!hash || !name.endsWith(hash)) return undefined;
  return name.endsWith(`-${hash}`) ? name.slice(0, -hash.length - 1) : name;
}

/**
 * The workload of `pod`: its own name and kind Pod unless the orchestrator generated its name, then
 * its controller, lifted to the Deployment, Rollout, DeploymentConfig or CronJob above it when the
 * controller's name or the Pod's labels show one. `namespace` is the request's, for a Pod naming none.
 */
export function workloadMeta(pod: V1Pod, namespace: string): WorkloadMeta {
  const podName = str(pod.metadata?.name);
  const ns = str(pod.metadata?.namespace) || namespace;
  const ref = str(pod.metadata?.generateName) ? controllerOf(pod) : undefined;
  if (!ref) return { name: podName, namespace: ns, kind: 'Pod', apiVersion: 'v1' };
  const labels = pod.metadata?.labels ?? {};
  const meta = (name: string, kind: string, apiVersion = ref.apiVersion): WorkloadMeta => ({ name: name || podName, namespace: ns, kind, apiVersion });
  if (ref.kind === 'ReplicaSet') {
    const deployment = withoutHash(ref.name, labels[TEMPLATE_HASH_LABEL]);
    if (deployment !== undefined) return meta(deployment, 'Deployment');
    // Argo Rollouts; the Go mesh reports this version, not the ReplicaSet's group.
    const rollout = withoutHash(ref.name, labels[ROLLOUT_HASH_LABEL]);
    if (rollout !== undefined) return meta(rollout, 'Rollout', 'v1alpha1');
  }
  if (ref.kind === 'ReplicationController' && labels[DEPLOYMENT_CONFIG_LABEL]) return meta(labels[DEPLOYMENT_CONFIG_LABEL], 'DeploymentConfig');
  const cron = ref.kind === 'Job' ? CRON_JOB_NAME.exec(ref.name) : null;
  // The CronJob's version cannot be read from the Pod; batch/v1 is the one served today.
  if (cron) return meta(cron[1]!, 'CronJob', 'batch/v1');
  return meta(ref.name, ref.kind);
}

/** The canonical labels to add: those the Pod lacks (or has empty); values it set are left as they are. */
export function canonicalLabels(pod: V1Pod, workload: WorkloadMeta): Record<string, string> {
  const labels = pod.metadata?.labels ?? {};
  const derived = canonicalService(labels, workload.name);
  const out: Record<string, string> = {};
  if (!labels[CANONICAL_NAME_LABEL]) out[CANONICAL_NAME_LABEL] = derived.name;
  if (!labels[CANONICAL_REVISION_LABEL]) out[CANONICAL_REVISION_LABEL] = derived.revision;
  return out;
}

/** `kubernetes://apis/<apiVersion>/namespaces/<ns>/<kind>s/<name>`, the OWNER the Go mesh's telemetry reads; none without a version or name. */
export function ownerUri(workload: WorkloadMeta): string | undefined {
  if (!workload.apiVersion || !workload.name) return undefined;
  return `kubernetes://apis/${workload.apiVersion}/namespaces/${workload.namespace || 'default'}/${workload.kind.toLowerCase()}s/${workload.name}`;
}

/** MESH_META_WORKLOAD_NAME (the workload-name label overrides the guess) and MESH_META_OWNER, each when known. */
export function workloadEnv(pod: V1Pod, workload: WorkloadMeta): V1EnvVar[] {
  const name = pod.metadata?.labels?.[WORKLOAD_NAME_LABEL] || workload.name;
  const owner = ownerUri(workload);
  return [...(name ? [{ name: 'MESH_META_WORKLOAD_NAME', value: name }] : []), ...(owner ? [{ name: 'MESH_META_OWNER', value: owner }] : [])];
}
