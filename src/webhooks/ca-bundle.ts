// The caBundle of the webhook configurations (INJECTION_WEBHOOK_CONFIG_NAME, mutating, and
// VALIDATION_WEBHOOK_CONFIG_NAME, validating): the orchestrator's API server trusts our webhooks
// only through it. At start and every period the discovery server reads both configurations and
// patches (JSON Patch) every webhook whose bundle lacks its serving certificate, so a certificate
// change or a re-applied manifest with an empty bundle is repaired. Replicas each serve their own
// certificate when none is given, so the bundle keeps the other unexpired certificates it holds
// (at most MAX_CERTIFICATES, newest first) beside ours. The revision tag configurations pointing at
// this revision (./revision-tags.ts) are kept the same way.
import { X509Certificate } from 'node:crypto';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import { messageOf, statusOf, type OrchestratorClient } from '../config/informer.js';
import { inRevision, REVISION_LABEL } from '../config/revision.js';

const log = scope('validationController');

export const MAX_CERTIFICATES = 8;
const DEFAULT_PERIOD_MS = 15_000;

export interface WebhookTarget {
  /** `mutatingwebhookconfigurations` or `validatingwebhookconfigurations`. */
  readonly plural: 'mutatingwebhookconfigurations' | 'validatingwebhookconfigurations';
  readonly name: string;
}

interface WebhookConfiguration {
  metadata?: { resourceVersion?: string; labels?: Record<string, string> };
  webhooks?: Array<{ name?: string; clientConfig?: { caBundle?: string } }>;
}

/**
 * The configurations to keep up to date (INJECTION_WEBHOOK_CONFIG_NAME, VALIDATION_WEBHOOK_CONFIG_NAME,
 * whose `${namespace}` is the control plane's namespace); an empty name skips that one.
 */
export function webhookTargets(names: { namespace: string; injection: string; validation: string }): WebhookTarget[] {
  const targets: WebhookTarget[] = [];
  const injection = names.injection;
  if (injection) targets.push({ plural: 'mutatingwebhookconfigurations', name: injection });
  const validation = names.validation.replace('${namespace}', names.namespace || 'mesh-system');
  if (validation) targets.push({ plural: 'validatingwebhookconfigurations', name: validation });
  return targets;
}

/** The certificates of a PEM bundle, unparseable blocks dropped. */
function certificates(pem: string): X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.flatMap((b) => {
    try {
      return [new X509Certificate(b)];
    } catch {
      return [];
    }
  });
}

/** Our certificate first, then the bundle's other unexpired ones, newest first, bounded. */
export function mergeBundle(ours: string, existingBase64: string, now = new Date()): string {
  const own = certificates(ours);
  const fingerprints = new Set(own.map((c) => c.fingerprint256));
  const others = certificates(Buffer.from(existingBase64, 'base64').toString('utf8'))
    .filter((c) => !fingerprints.has(c.fingerprint256) && new Date(c.validTo) > now)
    .sort((a, b) => Date.parse(b.validFrom) - Date.parse(a.validFrom));
  const kept = [...own, ...others].slice(0, MAX_CERTIFICATES);
  return Buffer.from(kept.map((c) => c.toString().trim()).join('\n') + '\n').toString('base64');
}

/** Whether the bundle already trusts our certificate. */
function trusts(bundleBase64: string | undefined, ours: string): boolean {
  const own = new Set(certificates(ours).map((c) => c.fingerprint256));
  return certificates(Buffer.from(bundleBase64 ?? '', 'base64').toString('utf8')).some((c) => own.has(c.fingerprint256));
}

export interface CaBundleOptions {
  readonly client: OrchestratorClient;
  readonly targets: readonly WebhookTarget[];
  /** The serving certificate (PEM), read at each reconciliation so a change is noticed. */
  readonly certificatePem: () => string;
  readonly periodMs?: number;
  /** REVISION: a configuration labelled for another revision (mesh.io/rev) is that revision's to keep. */
  readonly revision?: string;
  /** The revision tag configurations pointing at this revision (read at each pass), kept like the targets. */
  readonly tagTargets?: () => readonly WebhookTarget[];
}

export class CaBundleUpkeep {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly options: CaBundleOptions) {}

  /** Reconciles now, then every period. */
  start(): Promise<void> {
    this.timer = setInterval(() => void this.reconcile(), this.options.periodMs ?? DEFAULT_PERIOD_MS);
    return this.reconcile();
  }

  close(): Promise<void> {
    clearInterval(this.timer);
    return this.running;
  }

  /** One pass over the targets (passes never overlap). Errors are counted and logged, never thrown. */
  reconcile(): Promise<void> {
    this.running = this.running.then(() => Promise.all(this.targets().map((t) => this.reconcileOne(t)))).then(() => undefined);
    return this.running;
  }

  private targets(): WebhookTarget[] {
    const all = [...this.options.targets, ...(this.options.tagTargets?.() ?? [])];
    return all.filter((t, i) => all.findIndex((o) => o.plural === t.plural && o.name === t.name) === i);
  }

  private async reconcileOne(target: WebhookTarget): Promise<void> {
    const path = `/apis/admissionregistration.k8s.io/v1/${target.plural}/${target.name}`;
    const ours = this.options.certificatePem();
    let config: WebhookConfiguration;
    try {
      config = (await this.options.client.request('GET', path)) as WebhookConfiguration;
      counter('validator_validation_config_load').inc();
    } catch (e) {
      counter('validator_validation_config_load_error').inc();
      const missing = statusOf(e) === 404;
      log.warn(`${target.plural}/${target.name}: ${missing ? 'not found; is the webhook configuration applied?' : messageOf(e)}`);
      return;
    }
    if (!inRevision(config.metadata?.labels, this.options.revision)) {
      log.warn(`${target.plural}/${target.name}: labelled ${REVISION_LABEL}=${config.metadata?.labels?.[REVISION_LABEL]}, not this control plane's revision ${this.options.revision}; left alone`);
      return;
    }
    const webhooks = config.webhooks ?? [];
    // `test` ops make the patch fail rather than overwrite a concurrent change (another replica's).
    const ops = webhooks.flatMap((w, i) => {
      const current = w.clientConfig?.caBundle;
      if (trusts(current, ours)) return [];
      const value = mergeBundle(ours, current ?? '');
      const at = `/webhooks/${i}/clientConfig/caBundle`;
      return [
        { op: 'test', path: `/webhooks/${i}/name`, value: w.name },
        current === undefined ? { op: 'add', path: at, value } : { op: 'replace', path: at, value },
      ];
    });
    if (ops.length === 0) return;
    try {
      await this.options.client.request('PATCH', path, [{ op: 'test', path: '/metadata/resourceVersion', value: config.metadata?.resourceVersion }, ...ops], 'application/json-patch+json');
      counter('validator_validation_config_updates').inc();
      log.info(`${target.plural}/${target.name}: caBundle set to trust the serving certificate (${ops.length / 2} webhooks)`);
    } catch (e) {
      counter('validator_validation_config_update_error').inc();
      log.warn(`${target.plural}/${target.name}: caBundle patch failed: ${messageOf(e)}; retrying at the next pass`);
    }
  }
}
