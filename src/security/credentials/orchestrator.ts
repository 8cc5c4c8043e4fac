// Credentials from the orchestrator's Secrets: one informer over every namespace's Secrets (the Go
// mesh watches them too, for credentialName), each Secret's data decoded into the store.
import { scope } from '../../common/log.js';
import { collectionPath, InformerGroup, OrchestratorClient, type InformerGroupOptions, type ObjectMeta } from '../../config/informer.js';
import { credentialOf, type CredentialStore } from './store.js';

const log = scope('secretcontroller');

const SECRETS = { kind: 'Secret', group: '', version: 'v1', plural: 'secrets' } as const;

interface SecretObject {
  metadata?: ObjectMeta;
  data?: Record<string, string>;
}

function decoded(secret: SecretObject): Map<string, Buffer> {
  return new Map(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')]));
}

export interface OrchestratorCredentialsOptions extends InformerGroupOptions {
  /** --orchconfig; the in-cluster configuration when absent. */
  kubeconfig?: string | undefined;
}

export class OrchestratorCredentials {
  private readonly informers: InformerGroup;

  constructor(
    private readonly store: CredentialStore,
    private readonly options: OrchestratorCredentialsOptions = {},
  ) {
    this.informers = new InformerGroup(options);
    const keyOf = (o: unknown): [string, string] | undefined => {
      const m = (o as SecretObject | null)?.metadata;
      return m?.name && m.namespace ? [m.namespace, m.name] : undefined;
    };
    this.informers.add('Secret (core/v1)', collectionPath(SECRETS), {
      apply: (o) => {
        const key = keyOf(o);
        if (!key) return undefined;
        store.set(key[0], key[1], credentialOf(decoded(o as SecretObject)));
        return key.join('/');
      },
      remove: (o) => {
        const key = keyOf(o);
        if (key) store.set(key[0], key[1], undefined);
      },
      prune: (seen) => {
        for (const key of store.keys()) {
          if (seen.has(key)) continue;
          const [namespace = '', name = ''] = key.split('/');
          store.set(namespace, name, undefined);
        }
      },
    });
  }

  /** Resolves once the Secrets have been listed. */
  async start(): Promise<void> {
    await this.informers.start(OrchestratorClient.connect(this.options.kubeconfig));
    log.info(`credentials: ${this.store.keys().length} Secrets with certificates or CA bundles`);
  }

  close(): Promise<void> {
    return this.informers.close();
  }
}
