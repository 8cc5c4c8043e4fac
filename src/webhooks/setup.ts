// The discovery server's webhooks: /inject and /validate on the HTTPS server, and with an
// orchestrator the revision tags (read before the webhooks serve, so that no Pod is routed by a tag
// not yet known) and the upkeep of the configurations' caBundle.
import { scope } from '../common/log.js';
import { OrchestratorClient, type InformerGroupOptions } from '../config/informer.js';
import { revisionName } from '../config/revision.js';
import { CaBundleUpkeep, webhookTargets } from './ca-bundle.js';
import { installInjection, type InjectionOptions } from './inject.js';
import { RevisionTags } from './revision-tags.js';
import type { WebhookServer } from './server.js';
import { installValidation } from './validation.js';

const log = scope('validationServer');

export interface WebhookSetupOptions {
  readonly server: WebhookServer;
  /** For the log line. */
  readonly httpsAddr: string;
  readonly injection: Omit<InjectionOptions, 'revisionTags'> & { readonly enabled: boolean };
  readonly validation: boolean;
  /** Absent without an orchestrator (local mode): no tags, no caBundle upkeep. */
  readonly orchestrator: (InformerGroupOptions & { readonly kubeconfig?: string }) | undefined;
  readonly webhookConfigs: { readonly namespace: string; readonly injection: string; readonly validation: string };
}

/** What runs until the server stops. */
export interface Webhooks {
  close(): Promise<void>;
}

export async function startWebhooks(o: WebhookSetupOptions): Promise<Webhooks> {
  let tags: RevisionTags | undefined;
  if (o.orchestrator && o.injection.enabled) {
    tags = new RevisionTags(o.orchestrator);
    await tags.start(OrchestratorClient.connect(o.orchestrator.kubeconfig));
  }
  const injecting = installInjection(o.server, { ...o.injection, revisionTags: () => tags?.tags() ?? new Map() });
  const validating = installValidation(o.server, { enabled: o.validation });
  let upkeep: CaBundleUpkeep | undefined;
  if (injecting || validating) {
    await o.server.start();
    log.info(`webhooks listening on ${o.httpsAddr}:${injecting ? ' /inject' : ''}${validating ? ' /validate' : ''}`);
    if (o.orchestrator) {
      const revision = revisionName(o.injection.revision);
      const bundle = new CaBundleUpkeep({ client: OrchestratorClient.connect(o.orchestrator.kubeconfig), targets: webhookTargets(o.webhookConfigs), certificatePem: () => o.server.certificatePem(), revision: o.injection.revision, tagTargets: () => tags?.targetsOf(revision) ?? [] });
      // A tag moved to this revision is patched now, not at the next period.
      tags?.onChange(() => void bundle.reconcile());
      upkeep = bundle;
      await bundle.start();
    }
  }
  return {
    close: async () => {
      await Promise.all([upkeep?.close(), tags?.close()]);
    },
  };
}
