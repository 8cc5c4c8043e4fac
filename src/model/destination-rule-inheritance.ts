// PILOT_ENABLE_DESTINATION_RULE_INHERITANCE, as the Go mesh does it: a DestinationRule without a
// host is the defaults of its namespace (the root namespace's: of the whole mesh). One per
// namespace counts (the first in namespace/name order; the Go mesh takes the oldest); the
// namespace's merges over the mesh's, and a host rule merges over both, field by field: what the
// child sets wins, nested objects merge, lists are appended (protobuf's merge), and a child's `tls`
// replaces the parent's whole (a parent's client certificates must not leak into a child's SIMPLE).
import type { DestinationRule } from '../api/types.js';

type Json = unknown;

function isObject(v: Json): v is Record<string, Json> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** protobuf-style merge of `child` over `parent` (neither is changed). */
function mergeFields(parent: Json, child: Json): Json {
  if (child === undefined) return parent;
  if (Array.isArray(parent) && Array.isArray(child)) return [...parent, ...child];
  if (!isObject(parent) || !isObject(child)) return child;
  const out: Record<string, Json> = { ...parent };
  for (const [k, v] of Object.entries(child)) out[k] = mergeFields(parent[k], v);
  return out;
}

/** `child` with what it leaves unset taken from `parent`; the child's identity (metadata) stays. */
export function inheritRule(parent: DestinationRule | undefined, child: DestinationRule | undefined): DestinationRule | undefined {
  if (!parent) return child;
  if (!child || parent === child) return parent;
  // A parent without a trafficPolicy has nothing to give (the Go mesh returns the child as is).
  if (!parent.spec.trafficPolicy) return child;
  const spec = mergeFields(parent.spec, child.spec) as DestinationRule['spec'];
  const childTls = child.spec.trafficPolicy?.['tls'];
  if (childTls !== undefined && spec.trafficPolicy) spec.trafficPolicy = { ...spec.trafficPolicy, tls: childTls };
  return { ...child, spec };
}

/** A rule without a host: its namespace's (or the mesh's) defaults. */
export function isInheritable(rule: DestinationRule): boolean {
  return !rule.spec.host;
}

/**
 * The defaults per namespace, each already merged over the mesh's (root namespace's); `warn`
 * hears of a second host-less rule in one namespace, which is ignored.
 */
export function namespaceDefaults(rules: readonly DestinationRule[], rootNamespace: string, warn: (m: string) => void): ReadonlyMap<string, DestinationRule> {
  const own = new Map<string, DestinationRule>();
  for (const r of rules.filter(isInheritable)) {
    const first = own.get(r.metadata.namespace);
    if (first) warn(`DestinationRule ${r.metadata.namespace}/${r.metadata.name} has no host, like ${first.metadata.name} of the same namespace: it is ignored (one mesh/namespace-wide rule per namespace)`);
    else own.set(r.metadata.namespace, r);
  }
  const mesh = own.get(rootNamespace);
  const out = new Map<string, DestinationRule>();
  for (const [ns, r] of own) out.set(ns, ns === rootNamespace ? r : inheritRule(mesh, r)!);
  return out;
}
