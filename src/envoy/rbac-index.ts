// An index of RBAC policies by request path, so that a decision over thousands of policies only
// evaluates the few that could match. It never changes a decision: a policy is left out only when
// none of its permissions can match the path, and the candidates keep the policies' order, so the
// first matching policy is the one a full scan finds.
import type { Permission, Policy } from '../gen/envoy/config/rbac/v3/rbac_pb.js';

/** The paths a permission can match: exact paths and path prefixes; undefined = any path. */
interface PathKeys {
  readonly exact: readonly string[];
  readonly prefix: readonly string[];
}

function union(keys: readonly (PathKeys | undefined)[]): PathKeys | undefined {
  if (keys.some((k) => k === undefined)) return undefined;
  return { exact: keys.flatMap((k) => k!.exact), prefix: keys.flatMap((k) => k!.prefix) };
}

const size = (k: PathKeys) => k.exact.length + k.prefix.length;

/** A necessary condition on the path for the permission to match, when there is one. */
function pathKeys(p: Permission): PathKeys | undefined {
  const r = p.rule;
  switch (r.case) {
    case 'urlPath': {
      if (r.value.rule.case !== 'path') return undefined;
      const m = r.value.rule.value;
      if (m.ignoreCase) return undefined;
      if (m.matchPattern.case === 'exact') return { exact: [m.matchPattern.value], prefix: [] };
      if (m.matchPattern.case === 'prefix') return { exact: [], prefix: [m.matchPattern.value] };
      return undefined;
    }
    case 'orRules':
      return union(r.value.rules.map(pathKeys));
    case 'andRules': {
      // Every member must match: the narrowest member's paths are a condition of the whole.
      const known = r.value.rules.map(pathKeys).filter((k): k is PathKeys => k !== undefined);
      return known.length ? known.reduce((a, b) => (size(b) < size(a) ? b : a)) : undefined;
    }
    default:
      return undefined;
  }
}

/** Given the path (query excluded), the positions of the policies that could match it, ascending. */
export type PolicyIndex = (path: string) => readonly number[];

function push(map: Map<string, number[]>, key: string, i: number): void {
  const list = map.get(key);
  if (list === undefined) map.set(key, [i]);
  else if (list[list.length - 1] !== i) list.push(i);
}

/** Indexes `policies` (in evaluation order) by the paths their permissions require. */
export function indexPoliciesByPath(policies: readonly Pick<Policy, 'permissions'>[]): PolicyIndex {
  const all = policies.map((_, i) => i);
  const always: number[] = [];
  const exact = new Map<string, number[]>();
  const prefix = new Map<string, number[]>();
  policies.forEach((p, i) => {
    const keys = union(p.permissions.map(pathKeys));
    if (keys === undefined) {
      always.push(i);
      return;
    }
    for (const e of keys.exact) push(exact, e, i);
    for (const x of keys.prefix) push(prefix, x, i);
  });
  // Few policies, or few that the path narrows down: a plain scan is as fast.
  if (always.length === policies.length || policies.length < 16) return () => all;
  const prefixLengths = [...new Set([...prefix.keys()].map((k) => k.length))].sort((a, b) => a - b);
  return (path) => {
    const found = new Set<number>(always);
    for (const i of exact.get(path) ?? []) found.add(i);
    for (const len of prefixLengths) {
      if (len > path.length) break;
      for (const i of prefix.get(path.slice(0, len)) ?? []) found.add(i);
    }
    return [...found].sort((a, b) => a - b);
  };
}
