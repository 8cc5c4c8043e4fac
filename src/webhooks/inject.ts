// The injection webhook (POST /inject): a mutating admission.k8s.io/v1 AdmissionReview for a Pod in,
// the verdict of ./inject-policy.ts and the JSON Patch of ./inject-pod.ts out. A Pod that is not to
// be injected is admitted unchanged; a Pod whose annotations cannot be honoured is denied with the
// reason (failing closed: a Pod asking for capture it would not get must not run uncaptured).
import type { V1Pod } from '@kubernetes/client-node';
import { settingDefault } from '../common/env.js';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import { revisionName, type RevisionTagMap } from '../config/revision.js';
import { admissionHandler, answer, parseReview, type AdmissionHandlerOptions, type AdmissionReviewOut } from './admission.js';
import { InjectionError, injectionVerdict } from './inject-policy.js';
import { injectionPatch } from './inject-pod.js';
import type { TemplateFile } from './inject-template.js';
import type { WebhookServer } from './server.js';


const log = scope('validationServer');

export interface InjectionOptions extends AdmissionHandlerOptions {
  readonly template: Pick<TemplateFile, 'current'>;
  /** The labels of a namespace; undefined when it is not known. */
  readonly namespaceLabels: (namespace: string) => Readonly<Record<string, string>> | undefined;
  readonly clusterId: string;
  readonly domain: string;
  /** The mesh's trust domain, the sidecar's TRUST_DOMAIN (so that its certificate request names what the CA issues). */
  readonly trustDomain?: string;
  /** ENABLE_LEGACY_FSGROUP_INJECTION; defaults to the setting. */
  readonly legacyFsGroup?: boolean;
  /** INJECT_ENABLED; defaults to the setting. */
  readonly enabled?: boolean;
  /** REVISION (empty: `default`): which Pods are ours, and the `mesh.io/rev` label injected Pods get. */
  readonly revision?: string;
  /** The revision tags in the cluster (tag -> revision); none when absent. */
  readonly revisionTags?: () => RevisionTagMap;
}

/** The answer to one review; throws BadReview when it is not one. */
export function injectionReview(body: unknown, options: InjectionOptions): AdmissionReviewOut {
  const request = parseReview(body);
  counter('sidecar_injection_requests_total').inc();
  const resource = request.resource;
  const pod = request.object as V1Pod | undefined;
  if (request.operation !== 'CREATE' || resource?.resource !== 'pods' || (resource.group ?? '') !== '' || typeof pod !== 'object' || pod === null) {
    counter('sidecar_injection_skip_total').inc({ type: 'not_pod_create' });
    return answer(request, { allowed: true });
  }
  const namespace = request.namespace ?? pod.metadata?.namespace ?? 'default';
  const name = pod.metadata?.name ?? pod.metadata?.generateName ?? '';
  try {
    const revision = revisionName(options.revision);
    const verdict = injectionVerdict(pod, namespace, options.namespaceLabels(namespace), revision, options.revisionTags?.());
    if (!verdict.inject) {
      counter('sidecar_injection_skip_total').inc({ type: verdict.reason });
      log.debug(`not injecting ${namespace}/${name}: ${verdict.message}`);
      return answer(request, { allowed: true });
    }
    const patch = injectionPatch(pod, {
      template: options.template.current(),
      clusterId: options.clusterId,
      domain: options.domain,
      ...(options.trustDomain ? { trustDomain: options.trustDomain } : {}),
      legacyFsGroup: options.legacyFsGroup ?? settingDefault('ENABLE_LEGACY_FSGROUP_INJECTION'),
      revision,
      namespace,
    });
    counter('sidecar_injection_success_total').inc();
    log.info(`injected the sidecar into ${namespace}/${name}`);
    return answer(request, { allowed: true, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') });
  } catch (e) {
    if (!(e instanceof InjectionError)) throw e;
    counter('sidecar_injection_failure_total').inc();
    log.warn(`denied ${namespace}/${name}: ${e.message}`);
    return answer(request, { allowed: false, status: { code: 400, reason: 'BadRequest', message: `sidecar injection: ${e.message}` } });
  }
}

/** Serves /inject on the webhook server unless INJECT_ENABLED is false. Returns whether it did. */
export function installInjection(server: WebhookServer, options: InjectionOptions): boolean {
  if (!(options.enabled ?? settingDefault('INJECT_ENABLED'))) {
    log.info('INJECT_ENABLED=false: the injection webhook (/inject) is off');
    return false;
  }
  // A request answered without a verdict is a failed injection request.
  server.route('/inject', admissionHandler('injection', (body) => injectionReview(body, options), () => counter('sidecar_injection_failure_total').inc(), options));
  return true;
}
