// Fetching the secrets TLS contexts name (the main process only; workers get what it applied):
// over the ADS stream, or over SDS's StreamSecrets to the server behind a static cluster (the
// agent's `sds-grpc` on its Unix socket). One stream per cluster, subscribed to the names asked
// of it so far; every response is applied like any xDS update (replicated to the workers, then
// ACKed), so a renewed certificate reaches every worker before the agent hears the ACK.
import type { MessageInitShape } from '@bufbuild/protobuf';
import { scope } from '../../common/log.js';
import type { NodeSchema } from '../../gen/envoy/config/core/v3/base_pb.js';
import { AdsClient, type AdsUpdate } from '../../envoy/ads-client.js';
import { TypeUrl } from '../../envoy/types.js';
import type { SdsSource, SecretManager } from './secrets.js';

const log = scope('config');

export interface SdsFetcherOptions {
  readonly secrets: SecretManager;
  /** The proxy's ADS client (secrets whose sds_config is `ads`). */
  readonly ads: AdsClient;
  readonly node: MessageInitShape<typeof NodeSchema>;
  /** The bootstrap's static clusters as gRPC targets (`unix:<path>` or `host:port`). */
  readonly targets: ReadonlyMap<string, string>;
  /** Applies an update (and NACKs it by throwing). */
  readonly apply: (u: AdsUpdate) => Promise<void>;
  readonly initialBackoffMs?: number;
}

export class SdsFetcher {
  private readonly streams = new Map<string, AdsClient>();
  private readonly names = new Map<string, Set<string>>();

  constructor(private readonly o: SdsFetcherOptions) {
    o.secrets.subscriber = (ref) => this.subscribe(ref.name, ref.source);
  }

  private key(source: SdsSource): string {
    return source.kind === 'ads' ? '' : source.cluster;
  }

  private subscribe(name: string, source: SdsSource): void {
    const key = this.key(source);
    const names = this.names.get(key) ?? new Set<string>();
    this.names.set(key, names.add(name));
    if (source.kind === 'ads') {
      this.o.ads.watch(TypeUrl.Secret, names);
      return;
    }
    let client = this.streams.get(key);
    if (!client) {
      const target = this.o.targets.get(source.cluster);
      // Not a ConfigError: the reference compiles and warms; its TLS refuses connections until then.
      if (!target) {
        log.error(`sds_config names cluster ${source.cluster}, which is not a static cluster of the bootstrap with an address: secret ${name} cannot be fetched`);
        return;
      }
      client = new AdsClient({
        address: target,
        node: this.o.node,
        service: 'sds',
        wildcardTypes: [],
        followDependencies: false,
        onUpdate: (u) => this.o.apply(u),
        ...(this.o.initialBackoffMs !== undefined ? { initialBackoffMs: this.o.initialBackoffMs } : {}),
      });
      client.on('connected', () => log.info(`SDS stream to ${source.cluster} (${target}) connected`));
      this.streams.set(key, client);
      client.watch(TypeUrl.Secret, names);
      client.start();
      return;
    }
    client.watch(TypeUrl.Secret, names);
  }

  close(): void {
    for (const c of this.streams.values()) c.close();
    this.streams.clear();
  }
}
