// The proxy's side of key rotation at an issuer: the jwt_authn filter's onUnknownKid hook sends a
// JwksService request (proto/mesh/v1/jwks.proto) to the bootstrap's ADS server address (the
// agent's xDS proxy, which relays it, or the discovery server itself). Fire and forget: the
// request that had the unknown kid already got its 401, nothing here waits on the answer, and a
// failure is only logged at debug. New keys, if any, arrive with the next LDS push.
import { scope } from '../common/log.js';
import { JwksRefreshClient } from '../envoy/jwks-service.js';
import { statName, type StatsStore } from './stats.js';

const log = scope('jwt');

export class JwksRefresher {
  private readonly client: JwksRefreshClient;
  private readonly counters;

  constructor(address: string, stats: StatsStore) {
    this.client = new JwksRefreshClient(address);
    // Not Envoy stats (Envoy cannot report unknown kids): what the channel did, for operators and tests.
    const c = (stat: string) => stats.counter(statName('jwks_refresh', stat));
    this.counters = { requested: c('requested'), accepted: c('accepted'), refused: c('refused'), failed: c('failed') };
  }

  /** The jwt_authn filter's onUnknownKid. */
  readonly onUnknownKid = (issuer: string, kid: string): void => {
    this.counters.requested.inc();
    this.client.requestRefresh(issuer, kid).then(
      (v) => {
        (v.accepted ? this.counters.accepted : this.counters.refused).inc();
        log.debug(`JWKS refresh for an unknown kid ${v.accepted ? 'accepted' : 'refused'}: ${v.reason}`, { issuer, kid });
      },
      (e: Error) => {
        this.counters.failed.inc();
        log.debug(`JWKS refresh for an unknown kid failed: ${e.message}`, { issuer, kid });
      },
    );
  };

  close(): void {
    this.client.close();
  }
}
