// One request's retries once a retriable outcome asks for one, as Envoy's RetryStateImpl decides
// them: the retry limit, a slot under the cluster's max_retries (or retry budget), the back-off,
// and where the retry goes (the previous_hosts predicate, the previous_priorities levels). Counted
// where Envoy counts them: the cluster's and the route's upstream_rq_retry and its _limit_exceeded,
// _overflow and _success parts. A request that is never retried makes none of this.
import type { StreamRequest } from '../../envoy/request.js';
import { ResponseFlag } from '../../envoy/response-flags.js';
import { excludeTriedPriorities, type RetrySpec } from '../retry-policy.js';
import type { Endpoint } from '../upstream-pools.js';
import type { Target } from './router.js';

export type RetryCounter = 'retry' | 'retryLimitExceeded' | 'retryOverflow' | 'retrySuccess';

/** One retry counter of the cluster's and of the route's stats. */
export function chargeRetry(target: Target, counter: RetryCounter): void {
  target.cluster.responses?.[counter].inc();
  target.route.stats?.[counter].inc();
}

export class RetryState {
  /** The endpoints of the attempts so far, kept from the first retry on when previous_hosts or previous_priorities applies. */
  private tried: Endpoint[] | undefined = undefined;
  /** previous_priorities: the priority levels retries leave out now. */
  private excluded: Set<number> | undefined = undefined;

  constructor(
    private readonly spec: RetrySpec,
    private readonly target: Target,
    private readonly sreq: StreamRequest,
  ) {}

  /**
   * Whether attempt number `attempts`, whose outcome is retriable, is retried: false once the
   * retries are used up (flag URX) or the cluster has no retry slot; else the slot goes to `hold`
   * and `retry` runs after the back-off.
   */
  retry(attempts: number, hold: (release: () => void) => void, retry: () => void): boolean {
    if (attempts > this.spec.numRetries) {
      chargeRetry(this.target, 'retryLimitExceeded');
      this.sreq.streamInfo?.setResponseFlag(ResponseFlag.UpstreamRetryLimitExceeded);
      return false;
    }
    const breaker = this.target.cluster.breaker;
    if (breaker) {
      const slot = breaker.admit(true);
      if (!slot) {
        chargeRetry(this.target, 'retryOverflow');
        return false;
      }
      hold(slot);
    }
    chargeRetry(this.target, 'retry');
    setTimeout(retry, this.spec.backOffMs(attempts));
    return true;
  }

  /**
   * A retry's endpoint, from the priority levels previous_priorities leaves it; with the
   * previous_hosts predicate, picked again (up to its host_selection_retry_max_attempts times)
   * while it is one an earlier attempt went to. The endpoint is remembered as tried.
   */
  endpoint(): Endpoint | undefined {
    const { cluster, hash, endpoint: first } = this.target;
    const { reselectPrevious: again, priorityUpdateFrequency: frequency } = this.spec;
    if (again === 0 && frequency === 0) return cluster.pick(this.sreq, hash);
    const tried = (this.tried ??= [first]);
    const excluded = frequency > 0 ? excludeTriedPriorities(tried, frequency, (this.excluded ??= new Set())) : undefined;
    let endpoint = cluster.pick(this.sreq, hash, excluded);
    for (let i = 0; i < again && endpoint && tried.some((t) => t.host === endpoint!.host && t.port === endpoint!.port); i++) endpoint = cluster.pick(this.sreq, hash, excluded);
    if (endpoint) tried.push(endpoint);
    return endpoint;
  }
}
