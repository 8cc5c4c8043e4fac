// RBAC at scale: one ALLOW AuthorizationPolicy of RULES rules, translated by the real builder and
// compiled by the proxy's evaluator; prints the time of one decision (denied and allowed
// requests), p50/p99/max over many requests, and the compile time. See docs/bench.md.
import { performance } from 'node:perf_hooks';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { compileRbacFilter } from '../../src/envoy/rbac.js';
import { requestView, type RequestViewInit } from '../../src/envoy/request.js';
import type { AuthorizationPolicy, Rule } from '../../src/api/types.js';

const RULES = Number(process.env.RULES ?? 6000);
const REQUESTS = Number(process.env.REQUESTS ?? 2000);
const ISSUER = 'https://issuer.example';

const rules: Rule[] = Array.from({ length: RULES }, (_, i) => ({
  from: [{ source: { requestPrincipals: [`${ISSUER}/user-${i}`] } }],
  to: [{ operation: { methods: ['GET', 'PUT'], paths: [`/api/v1/items/${i}`, `/api/v1/items/${i}/*`] } }],
  when: [{ key: 'request.headers[x-tenant]', values: ['acme', `team-${i % 50}`] }],
}));
const policy: AuthorizationPolicy = {
  apiVersion: 'security.mesh.io/v1beta1',
  kind: 'AuthorizationPolicy',
  metadata: { name: 'scale', namespace: 'bench' },
  spec: { action: 'ALLOW', rules },
};

const t0 = performance.now();
const { filters, warnings } = buildRbacFilters([policy]);
const t1 = performance.now();
if (warnings.length) throw new Error(warnings.join('\n'));
const filter = compileRbacFilter(filters[0]!.config);
const t2 = performance.now();

const request = (path: string, sub: string): RequestViewInit => ({
  method: 'GET',
  path,
  headers: { 'x-tenant': 'acme' },
  metadata: { 'envoy.filters.http.jwt_authn': { jwt_payload: { iss: ISSUER, sub } } },
});

function measure(label: string, make: (n: number) => RequestViewInit, want: 'continue' | 'reply'): string {
  // Warm-up (JIT), not measured.
  for (let n = 0; n < 200; n++) filter.decodeHeaders(requestView(make(n)));
  const times: number[] = [];
  for (let n = 0; n < REQUESTS; n++) {
    const req = requestView(make(n));
    const start = performance.now();
    const out = filter.decodeHeaders(req);
    times.push(performance.now() - start);
    if (out.kind !== want) throw new Error(`${label}: request ${n} got ${out.kind}, expected ${want}`);
  }
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!;
  const us = (ms: number) => `${(ms * 1000).toFixed(1)} µs`;
  return `| ${label} | ${us(at(0.5))} | ${us(at(0.99))} | ${us(times[times.length - 1]!)} |`;
}

console.log(`RBAC: one ALLOW policy, ${RULES} rules (principal x 2 paths x 2 methods x header); ${REQUESTS} requests per row`);
console.log(`translate ${(t1 - t0).toFixed(0)} ms, compile ${(t2 - t1).toFixed(0)} ms`);
console.log('| request | p50 | p99 | max |');
console.log('| --- | --- | --- | --- |');
console.log(measure('denied: no rule for the path', (n) => request(`/api/v1/other/${n}`, `user-${n % RULES}`), 'reply'));
console.log(measure('denied: path of a rule, wrong principal', (n) => request(`/api/v1/items/${n % RULES}`, 'mallory'), 'reply'));
console.log(measure('allowed: the last rules', (n) => request(`/api/v1/items/${RULES - 1 - (n % 10)}/x`, `user-${RULES - 1 - (n % 10)}`), 'continue'));
