// The validation webhook (POST /validate): an admission.k8s.io/v1 AdmissionReview in, the verdict of
// the shared validator out, with every error of the resource in the denial message.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { formatIssues } from '../api/errors.js';
import { validateResource } from '../api/validate.js';
import { asRecord } from '../api/values.js';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import { settingDefault } from '../common/env.js';
import type { WebhookServer } from './server.js';
import { admissionHandler, answer, parseReview, type AdmissionHandlerOptions, type AdmissionReviewOut } from './admission.js';

const log = scope('validation');

/** The verdict on one AdmissionReview; throws BadReview when it is not one. */
export function review(body: unknown): AdmissionReviewOut {
  const request = parseReview(body);
  const labels = { group: request.resource?.group ?? '', version: request.resource?.version ?? '', resource: request.resource?.resource ?? '' };
  // Deletions carry no object to judge.
  if (request.operation === 'DELETE' || request.object === undefined || request.object === null) return answer(request, { allowed: true });
  const result = validateResource(withNamespace(request.object, request.namespace));
  if (result.ok) {
    counter('validator_validation_passed').inc(labels);
    return answer(request, { allowed: true });
  }
  counter('validator_validation_failed').inc({ ...labels, reason: 'invalid_resource' });
  const message = formatIssues(result.resource ? { resource: result.resource } : {}, result.issues).join('\n');
  log.info(`rejected admission request ${request.uid}: ${message.replace(/\n/g, '; ')}`);
  return answer(request, { allowed: false, status: { code: 400, reason: 'BadRequest', message } });
}

/** Objects in a namespaced request may omit metadata.namespace; the request names it. */
function withNamespace(object: unknown, namespace: string | undefined): unknown {
  const fields = asRecord(object);
  const metadata = asRecord(fields?.['metadata']);
  if (namespace === undefined || fields === undefined || metadata === undefined || 'namespace' in metadata) return object;
  return { ...fields, metadata: { ...metadata, namespace } };
}

export type ValidationHandlerOptions = AdmissionHandlerOptions;

/** The HTTP side: method, content type, size and JSON checks, then `review`. */
export function validationHandler(options: ValidationHandlerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  return admissionHandler('validation', review, (status) => counter('validator_validation_http_error').inc({ status: String(status) }), options);
}

/** Serves /validate on the webhook server unless VALIDATION_ENABLED is false. Returns whether it did. */
export function installValidation(server: WebhookServer, options: ValidationHandlerOptions & { enabled?: boolean } = {}): boolean {
  const enabled = options.enabled ?? settingDefault('VALIDATION_ENABLED');
  if (!enabled) {
    log.info('VALIDATION_ENABLED=false: the validation webhook (/validate) is off');
    return false;
  }
  server.route('/validate', validationHandler(options));
  return true;
}
