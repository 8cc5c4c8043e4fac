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

const log = scope('validation');

const ADMISSION_API = 'admission.k8s.io/v1';
const DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024;

export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; reason: string; message: string };
}

export interface AdmissionReviewOut {
  apiVersion: typeof ADMISSION_API;
  kind: 'AdmissionReview';
  response: AdmissionResponse;
}

interface GroupVersionResource {
  group?: string;
  version?: string;
  resource?: string;
}

interface AdmissionRequest {
  uid: string;
  operation?: string;
  namespace?: string;
  resource?: GroupVersionResource;
  object?: unknown;
}

/** A request the webhook cannot answer with a verdict: HTTP 400 with this reason. */
export class BadReview extends Error {}

function parseReview(body: unknown): AdmissionRequest {
  const review = body as { apiVersion?: unknown; kind?: unknown; request?: Partial<AdmissionRequest> } | null;
  if (typeof review !== 'object' || review === null || review.kind !== 'AdmissionReview') {
    throw new BadReview('expected an AdmissionReview object');
  }
  if (review.apiVersion !== ADMISSION_API) throw new BadReview(`unsupported apiVersion ${JSON.stringify(review.apiVersion)}; expected ${ADMISSION_API}`);
  const request = review.request;
  if (typeof request !== 'object' || request === null || typeof request.uid !== 'string' || request.uid === '') {
    throw new BadReview('AdmissionReview has no request.uid');
  }
  return request as AdmissionRequest;
}

/** The verdict on one AdmissionReview; throws BadReview when it is not one. */
export function review(body: unknown): AdmissionReviewOut {
  const request = parseReview(body);
  const answer = (response: Omit<AdmissionResponse, 'uid'>): AdmissionReviewOut => ({
    apiVersion: ADMISSION_API,
    kind: 'AdmissionReview',
    response: { uid: request.uid, ...response },
  });
  const labels = { group: request.resource?.group ?? '', version: request.resource?.version ?? '', resource: request.resource?.resource ?? '' };
  // Deletions carry no object to judge.
  if (request.operation === 'DELETE' || request.object === undefined || request.object === null) return answer({ allowed: true });
  const result = validateResource(withNamespace(request.object, request.namespace));
  if (result.ok) {
    counter('validator_validation_passed').inc(labels);
    return answer({ allowed: true });
  }
  counter('validator_validation_failed').inc({ ...labels, reason: 'invalid_resource' });
  const message = formatIssues(result.resource ? { resource: result.resource } : {}, result.issues).join('\n');
  log.info(`rejected admission request ${request.uid}: ${message.replace(/\n/g, '; ')}`);
  return answer({ allowed: false, status: { code: 400, reason: 'BadRequest', message } });
}

/** Objects in a namespaced request may omit metadata.namespace; the request names it. */
function withNamespace(object: unknown, namespace: string | undefined): unknown {
  const fields = asRecord(object);
  const metadata = asRecord(fields?.['metadata']);
  if (namespace === undefined || fields === undefined || metadata === undefined || 'namespace' in metadata) return object;
  return { ...fields, metadata: { ...metadata, namespace } };
}

export interface ValidationHandlerOptions {
  /** Bodies larger than this are refused with 400. */
  maxBodyBytes?: number;
}

function refuse(res: ServerResponse, status: number, reason: string): void {
  counter('validator_validation_http_error').inc({ status: String(status) });
  log.debug(`validation request refused (${status}): ${reason}`);
  res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' }).end(`${reason}\n`);
}

/** The HTTP side: method, content type, size and JSON checks, then `review`. */
export function validationHandler(options: ValidationHandlerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  return (req, res) => {
    if (req.method !== 'POST') return refuse(res, 405, `method ${req.method ?? ''} not allowed; use POST`);
    const contentType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (contentType !== 'application/json') {
      req.resume();
      return refuse(res, 400, `invalid content-type ${JSON.stringify(contentType)}; expected application/json`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    req.on('data', (chunk: Buffer) => {
      if (refused) return;
      size += chunk.length;
      if (size > maxBodyBytes) {
        refused = true;
        refuse(res, 400, `request body larger than ${maxBodyBytes} bytes`);
        // Stop reading the rest once the answer is out: the connection closes.
        res.on('finish', () => req.destroy());
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (err) => log.debug(`validation request aborted: ${err.message}`));
    req.on('end', () => {
      if (refused) return;
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch (err) {
        return refuse(res, 400, `malformed JSON: ${err instanceof Error ? err.message : String(err)}`);
      }
      try {
        const out = review(body);
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(out));
      } catch (err) {
        if (err instanceof BadReview) return refuse(res, 400, err.message);
        // Outside the request's control: answer 500 rather than take the server down.
        log.error(`validation failed unexpectedly: ${err instanceof Error ? err.message : String(err)}`);
        refuse(res, 500, 'internal error');
      }
    });
  };
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
