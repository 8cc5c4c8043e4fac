// Label selection and host matching shared by registries, policies and sidecar scopes.
import { ROOT_NAMESPACE, type WorkloadSelector } from '../api/types.js';

/** True when every selector label is present with the same value; an empty selector matches all. */
export function labelsMatch(selector: Readonly<Record<string, string>> | undefined, labels: Readonly<Record<string, string>>): boolean {
  if (!selector) return true;
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

/**
 * Whether `host` matches `pattern`: equal, `*` (anything), or a `*.suffix` wildcard covering
 * any host ending in `.suffix`.
 */
export function hostMatches(pattern: string, host: string): boolean {
  if (pattern === '*' || pattern === host) return true;
  if (pattern.startsWith('*.')) return host.endsWith(pattern.slice(1));
  return false;
}

/** A workload as policy selection sees it. */
export interface WorkloadRef {
  readonly namespace: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** The part of a policy resource that selection reads. */
export interface Selectable {
  readonly metadata: { readonly namespace: string; readonly name: string };
  readonly spec: { readonly selector?: WorkloadSelector };
}

/**
 * The policies that apply to a workload: those of its namespace and those of the root namespace
 * (mesh-wide), whose `selector.matchLabels` all equal the workload's labels (no selector, or an
 * empty one: every workload in scope). Sorted root namespace first, then by namespace and name,
 * so that the generated config does not depend on the order of the store.
 */
export function selectPolicies<P extends Selectable>(workload: WorkloadRef, policies: readonly P[], rootNamespace = ROOT_NAMESPACE): P[] {
  const rank = (p: P) => (p.metadata.namespace === rootNamespace ? 0 : 1);
  return policies
    .filter((p) => (p.metadata.namespace === workload.namespace || p.metadata.namespace === rootNamespace) && labelsMatch(p.spec.selector?.matchLabels, workload.labels))
    .sort((a, b) => rank(a) - rank(b) || cmp(a.metadata.namespace, b.metadata.namespace) || cmp(a.metadata.name, b.metadata.name));
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
