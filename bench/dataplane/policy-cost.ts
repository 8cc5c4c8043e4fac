// The policy filters' cost per request, without the network: the bench's policy (the sample
// RequestAuthentication and the "allow admins" AuthorizationPolicy, as `dataplane` applies them)
// through the real builders, compiled by the proxy's jwt_authn and rbac filters, and one request
// carrying a valid token run through both, as the connection manager runs them: µs of CPU per
// request (process.cpuUsage over REQUESTS requests, ROUNDS times), the first request (which checks
// the signature) apart. See docs/bench.md.
//   npm run bench -- policy-cost        (REQUESTS=, ROUNDS=)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import type { AuthorizationPolicy, RequestAuthentication } from '../../src/api/types.js';
import { parseDocuments } from '../../src/api/parse.js';
import { compileJwtAuthn } from '../../src/envoy/jwt-authn.js';
import { compileRbacFilter } from '../../src/envoy/rbac.js';
import { requestView } from '../../src/envoy/request.js';
import { buildJwtAuthn } from '../../src/security/authn/builder.js';
import { buildRbacFilters } from '../../src/security/authz/builder.js';

const REQUESTS = Number(process.env.REQUESTS ?? 200_000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const ISSUER = 'http://127.0.0.1:8899';

function sample<T>(file: string): T {
  return parseDocuments(readFileSync(join(process.cwd(), 'samples', 'policies', file), 'utf8'))[0]!.value as T;
}

const { privateKey, publicKey } = await generateKeyPair('RS256');
const jwks = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'bench', alg: 'RS256', use: 'sig' }] });
// The sample issuer's token shape: sub, groups, an hour of lifetime.
const token = await new SignJWT({ groups: ['admins'] })
  .setProtectedHeader({ alg: 'RS256', kid: 'bench', typ: 'JWT' })
  .setIssuer(ISSUER)
  .setSubject('bench')
  .setIssuedAt()
  .setExpirationTime('1h')
  .sign(privateKey);

const jwtConfig = buildJwtAuthn([sample<RequestAuthentication>('01-require-jwt.yaml')], () => jwks);
if (!jwtConfig) throw new Error('the sample RequestAuthentication built no jwt_authn config');
const rbacBuilt = buildRbacFilters([sample<AuthorizationPolicy>('03-allow-admins.yaml')]);
if (rbacBuilt.warnings.length) throw new Error(rbacBuilt.warnings.join('\n'));
const jwt = compileJwtAuthn(jwtConfig);
const rbac = compileRbacFilter(rbacBuilt.filters[0]!.config);

const request = () => requestView({ method: 'GET', path: '/ip', authority: 'httpbin.default.svc.cluster.local', headers: { authorization: `Bearer ${token}`, 'user-agent': 'wrk' } });

/** One request through both filters; throws unless both let it through. */
async function once(): Promise<void> {
  const req = request();
  const a = await jwt.decodeHeaders(req);
  if (a.kind !== 'continue') throw new Error(`jwt_authn replied ${a.reply.status}: ${a.reply.body}`);
  const b = rbac.decodeHeaders(req);
  if (b.kind !== 'continue') throw new Error(`rbac replied ${b.reply.status}`);
}

/** µs of CPU per call of `fn`, over REQUESTS calls. */
async function cost(fn: () => unknown): Promise<number> {
  const t = process.cpuUsage();
  for (let i = 0; i < REQUESTS; i++) await fn();
  const used = process.cpuUsage(t);
  return (used.user + used.system) / REQUESTS;
}

const first = process.cpuUsage();
await once();
const firstUs = process.cpuUsage(first);
const lines = [`first request (signature check): ${((firstUs.user + firstUs.system) / 1000).toFixed(2)} ms CPU`];
for (let r = 0; r < ROUNDS; r++) {
  const view = await cost(request);
  const both = await cost(once);
  lines.push(`round ${r + 1}: ${(both - view).toFixed(2)} µs CPU per request in jwt_authn + rbac (${both.toFixed(2)} with building the request view, ${view.toFixed(2)} without filters; ${REQUESTS} requests)`);
}
lines.push(`signature checks: ${jwt.stats.signature_verifications}, cache hits: ${jwt.stats.jwt_cache_hit}, allowed: ${jwt.stats.allowed}`);
process.stdout.write(`${lines.join('\n')}\n`);
