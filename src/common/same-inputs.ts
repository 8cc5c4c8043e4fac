// Memoizing a pure function by the identities of its inputs, for builders called once per proxy
// with inputs that are shared objects (frozen config resources, snapshot values): proxies given the
// same inputs share one result instead of each building an equal one.
import { LRUCache } from 'lru-cache';

const ids = new WeakMap<object, number>();
let nextId = 0;

function idOf(o: object): number {
  let id = ids.get(o);
  if (id === undefined) ids.set(o, (id = ++nextId));
  return id;
}

/** An argument's part of the key: objects by identity, arrays by their elements', primitives by value. */
function keyPart(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(keyPart).join(',')}]`;
  if (typeof v === 'object' && v !== null) return `#${idOf(v)}`;
  if (typeof v === 'function') return `f${idOf(v)}`;
  return `${typeof v}:${String(v)}`;
}

/**
 * A key of values by identity: equal keys mean the same objects (arrays: the same elements, in
 * order) and equal primitives. Cheap, for memos within the lifetime of the objects.
 */
export function identityKey(...args: readonly unknown[]): string {
  return args.map(keyPart).join('|');
}

/**
 * `fn` memoized by the identities of its arguments (an array argument by its elements'): a call
 * whose arguments are the same objects in the same order returns the earlier result. Only for pure
 * functions of immutable inputs: a changed input must be a new object. Keeps the last `size` results.
 */
export function sameInputs<Args extends unknown[], R extends NonNullable<unknown>>(fn: (...args: Args) => R, size = 1024): (...args: Args) => R {
  const results = new LRUCache<string, R>({ max: size });
  return (...args: Args): R => {
    const key = identityKey(...args);
    let r = results.get(key);
    if (r === undefined) results.set(key, (r = fn(...args)));
    return r;
  };
}

/** One value per object, made on first use and gone with the object. */
export function perObject<K extends object, V>(make: (key: K) => V): (key: K) => V {
  const values = new WeakMap<K, V>();
  return (key: K): V => {
    let v = values.get(key);
    if (v === undefined) values.set(key, (v = make(key)));
    return v;
  };
}
