// The consistent-hash load balancers (RING_HASH, MAGLEV) and the route hash policy feeding them,
// with Envoy's semantics: a request's hash comes from the route's hash_policy list (header, cookie,
// connection source IP, query parameter; each one's hash folded into the previous, a terminal one
// that produced a hash ends the list; a missing cookie of a policy with a ttl is generated, see
// hash-cookie.ts); the ring maps it to the first point at or after it, Maglev to its slot of a
// 65537-entry table. The same hash always picks the same endpoint, and removing one endpoint moves
// only the keys that were on it (ring) or about 1/N of them (Maglev). Without a hash the pick is
// random, as in Envoy. MD5 stands in for Envoy's xxHash (another mapping, the same properties).
import { createHash } from 'node:crypto';
import type { RouteAction_HashPolicy } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { ConfigError } from '../envoy/config-error.js';
import type { RequestView } from '../envoy/request.js';
import type { AddCookie } from './hash-cookie.js';

const MASK64 = (1n << 64n) - 1n;

/** A 64-bit hash of a text. */
export function hashOf(text: string): bigint {
  return createHash('md5').update(text).digest().readBigUInt64BE(0);
}

/**
 * A request's hash from the route's hash policies, or undefined (no policy produced one).
 * `addCookie`: the router's, for cookie policies with a ttl whose cookie the request lacks.
 */
export type RequestHasher = (req: RequestView, addCookie?: AddCookie) => bigint | undefined;

/** A cookie's value in a Cookie header, without the double quotes RFC 6265 allows around it (as Envoy reads it). */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0 || part.slice(0, eq).trim() !== name) continue;
    const v = part.slice(eq + 1).trim();
    return v.length >= 2 && v.startsWith('"') && v.endsWith('"') ? v.slice(1, -1) : v;
  }
  return undefined;
}

function queryValue(path: string, name: string): string | undefined {
  const q = path.indexOf('?');
  if (q < 0) return undefined;
  return new URLSearchParams(path.slice(q + 1)).get(name) ?? undefined;
}

function compileOne(p: RouteAction_HashPolicy, field: string): (req: RequestView, addCookie?: AddCookie) => string | undefined {
  const s = p.policySpecifier;
  switch (s.case) {
    case 'header': {
      const name = s.value.headerName.toLowerCase();
      if (s.value.regexRewrite) throw new ConfigError(`${field}.header.regex_rewrite`, 'is not supported');
      return (req) => req.header(name);
    }
    case 'cookie': {
      const { name, path, ttl, attributes } = s.value;
      // An empty value is no value, as in Envoy.
      if (!ttl) return (req) => cookieValue(req.header('cookie'), name) || undefined;
      // With a ttl a missing cookie is generated (Envoy: whole seconds of the ttl) and hashed on.
      const wanted = { name, path, ttlSeconds: Number(ttl.seconds), attributes: attributes.map((a) => ({ name: a.name, value: a.value })) };
      return (req, addCookie) => cookieValue(req.header('cookie'), name) || addCookie?.(wanted);
    }
    case 'connectionProperties':
      return (req) => (s.value.sourceIp ? req.source.address : undefined);
    case 'queryParameter': {
      const name = s.value.name;
      return (req) => queryValue(req.path, name);
    }
    default:
      throw new ConfigError(field, `hash policy ${s.case ?? '(none)'} is not supported; use header, cookie, connection_properties or query_parameter`);
  }
}

/** Compiles a route's hash_policy list; undefined when it is empty. */
export function compileHashPolicies(policies: readonly RouteAction_HashPolicy[], field: string): RequestHasher | undefined {
  if (policies.length === 0) return undefined;
  const parts = policies.map((p, i) => ({ value: compileOne(p, `${field}[${i}]`), terminal: p.terminal }));
  return (req, addCookie) => {
    let hash: bigint | undefined;
    for (const p of parts) {
      const v = p.value(req, addCookie);
      if (v === undefined) continue;
      const h = hashOf(v);
      // Envoy folds each hash into the previous: rotate left by one, then xor.
      hash = hash === undefined ? h : (((hash << 1n) | (hash >> 63n)) & MASK64) ^ h;
      if (p.terminal) break;
    }
    return hash;
  };
}

export interface WeightedHost {
  readonly host: string;
  readonly port: number;
  readonly weight: number;
}

/** An endpoint index for a hash. */
export type HashTable = (hash: bigint) => number;

/** Envoy's defaults: minimum_ring_size 1024, maximum_ring_size 8M. */
export const RING_DEFAULTS = { min: 1024, max: 8 * 1024 * 1024 };

/** A ketama-style ring: each endpoint hashed at points proportional to its weight. */
export function ringHash(hosts: readonly WeightedHost[], minSize = RING_DEFAULTS.min, maxSize = RING_DEFAULTS.max): HashTable {
  const total = hosts.reduce((n, h) => n + h.weight, 0);
  const size = Math.min(Math.max(minSize, hosts.length), maxSize);
  const points: { hash: bigint; index: number }[] = [];
  hosts.forEach((h, index) => {
    const n = Math.max(1, Math.round((size * h.weight) / total));
    for (let i = 0; i < n; i++) points.push({ hash: hashOf(`${h.host}:${h.port}_${i}`), index });
  });
  points.sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
  return (hash) => {
    let lo = 0;
    let hi = points.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (points[mid]!.hash < hash) lo = mid + 1;
      else hi = mid;
    }
    return points[lo === points.length ? 0 : lo]!.index;
  };
}

/** Envoy's Maglev table size (a prime). */
export const MAGLEV_TABLE_SIZE = 65537;

/** Maglev: each endpoint fills table slots in its own permutation order, in turns weighted by its weight. */
export function maglev(hosts: readonly WeightedHost[], size = MAGLEV_TABLE_SIZE): HashTable {
  const m = BigInt(size);
  const perms = hosts.map((h) => {
    const key = `${h.host}:${h.port}`;
    return { offset: Number(hashOf(`${key}#offset`) % m), skip: Number(hashOf(`${key}#skip`) % (m - 1n)) + 1, next: 0, credit: 0 };
  });
  const maxWeight = Math.max(...hosts.map((h) => h.weight));
  const table = new Int32Array(size).fill(-1);
  let filled = 0;
  while (filled < size) {
    for (let i = 0; i < hosts.length && filled < size; i++) {
      const p = perms[i]!;
      // A host of half the top weight takes a slot every other turn.
      p.credit += hosts[i]!.weight / maxWeight;
      if (p.credit < 1) continue;
      p.credit -= 1;
      let slot = (p.offset + p.next * p.skip) % size;
      while (table[slot] !== -1) {
        p.next++;
        slot = (p.offset + p.next * p.skip) % size;
      }
      table[slot] = i;
      p.next++;
      filled++;
    }
  }
  return (hash) => table[Number(hash % m)]!;
}
