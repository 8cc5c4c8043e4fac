// A DestinationRule's `loadBalancer` beyond locality (locality-lb.ts), as the Go mesh validates
// it: `warmup` needs a duration, a minimumPercent of at most 100 and an aggression above 0; a
// consistent hash sets at most one of the deprecated minimumRingSize and maglev / ringHash; a
// Maglev table size is set, prime and below 5000011 (what Envoy accepts). Durations themselves
// are checked with every other traffic duration (semantic.ts).
import { asRecord, type Fields } from './values.js';
import { forEachTrafficPolicy } from './traffic-policies.js';

type Add = (path: string, message: string) => void;

/** Maglev's table size limit in Envoy (a size must be below it). */
const MAGLEV_LIMIT = 5000011;

function isPrime(n: number): boolean {
  if (n < 4) return n > 0; // as Envoy (and the Go mesh) count: 1, 2 and 3
  for (let f = 2; f * f <= n; f++) if (n % f === 0) return false;
  return true;
}

function warmup(w: Fields, at: string, add: Add): void {
  if (w['duration'] === undefined) add(`${at}.duration`, 'required');
  const min = w['minimumPercent'];
  if (min !== undefined && !(typeof min === 'number' && min >= 0 && min <= 100)) add(`${at}.minimumPercent`, `must be a percent between 0 and 100, got ${JSON.stringify(min)}`);
  const aggression = w['aggression'];
  if (aggression !== undefined && !(typeof aggression === 'number' && aggression > 0)) add(`${at}.aggression`, `must be greater than 0, got ${JSON.stringify(aggression)}`);
}

function consistentHash(h: Fields, at: string, add: Add): void {
  const maglev = asRecord(h['maglev']);
  if (h['minimumRingSize'] && (maglev || h['ringHash'] !== undefined)) add(`${at}.minimumRingSize`, 'only one of minimumRingSize or maglev/ringHash can be set');
  if (!maglev) return;
  const size = maglev['tableSize'];
  if (size === undefined || size === 0) add(`${at}.maglev.tableSize`, 'required for maglev');
  else if (!(typeof size === 'number' && Number.isInteger(size) && size > 0)) add(`${at}.maglev.tableSize`, `must be a whole number, got ${JSON.stringify(size)}`);
  else if (size >= MAGLEV_LIMIT) add(`${at}.maglev.tableSize`, `must be less than ${MAGLEV_LIMIT}, got ${size}`);
  else if (!isPrime(size)) add(`${at}.maglev.tableSize`, `must be a prime number, got ${size}`);
}

/** The rule's balancer settings everywhere they may appear. */
export function destinationRuleBalancer(spec: Fields, path: string, add: Add): void {
  forEachTrafficPolicy(spec, path, (policy, at) => {
    const lb = asRecord(policy['loadBalancer']);
    if (!lb) return;
    const w = asRecord(lb['warmup']);
    if (w) warmup(w, `${at}.loadBalancer.warmup`, add);
    const h = asRecord(lb['consistentHash']);
    if (h) consistentHash(h, `${at}.loadBalancer.consistentHash`, add);
  });
}
