// What the admission webhooks share: the admission.k8s.io/v1 AdmissionReview shapes, the checks
// every review request passes (method, content type, size, JSON, a request with a uid), and the
// answer. The validating (/validate) and mutating (/inject) handlers differ only in the verdict.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { scope } from '../common/log.js';

const log = scope('validationServer');

export const ADMISSION_API = 'admission.k8s.io/v1';
export const DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024;

export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; reason: string; message: string };
  /** Base64 of a JSON Patch (RFC 6902), with patchType JSONPatch. */
  patch?: string;
  patchType?: 'JSONPatch';
}

export interface AdmissionReviewOut {
  apiVersion: typeof ADMISSION_API;
  kind: 'AdmissionReview';
  response: AdmissionResponse;
}

export interface GroupVersionResource {
  group?: string;
  version?: string;
  resource?: string;
}

export interface AdmissionRequest {
  uid: string;
  operation?: string;
  namespace?: string;
  name?: string;
  resource?: GroupVersionResource;
  object?: unknown;
  dryRun?: boolean;
}

/** A request the webhook cannot answer with a verdict: HTTP 400 with this reason. */
export class BadReview extends Error {}

export function parseReview(body: unknown): AdmissionRequest {
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

export function answer(request: Pick<AdmissionRequest, 'uid'>, response: Omit<AdmissionResponse, 'uid'>): AdmissionReviewOut {
  return { apiVersion: ADMISSION_API, kind: 'AdmissionReview', response: { uid: request.uid, ...response } };
}

export interface AdmissionHandlerOptions {
  /** Bodies larger than this are refused with 400. */
  maxBodyBytes?: number;
}

/**
 * The HTTP side of a webhook: POST, application/json, bounded size, valid JSON, then `review`.
 * `refused(status)` is called for every request answered without a verdict (for the webhook's metric).
 */
export function admissionHandler(
  name: string,
  review: (body: unknown) => AdmissionReviewOut,
  refused: (status: number) => void,
  options: AdmissionHandlerOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const refuse = (res: ServerResponse, status: number, reason: string): void => {
    refused(status);
    log.debug(`${name} request refused (${status}): ${reason}`);
    res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' }).end(`${reason}\n`);
  };
  return (req, res) => {
    if (req.method !== 'POST') return refuse(res, 405, `method ${req.method ?? ''} not allowed; use POST`);
    const contentType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (contentType !== 'application/json') {
      req.resume();
      return refuse(res, 400, `invalid content-type ${JSON.stringify(contentType)}; expected application/json`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      if (tooLarge) return;
      size += chunk.length;
      if (size > maxBodyBytes) {
        tooLarge = true;
        refuse(res, 400, `request body larger than ${maxBodyBytes} bytes`);
        // Stop reading the rest once the answer is out: the connection closes.
        res.on('finish', () => req.destroy());
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (err) => log.debug(`${name} request aborted: ${err.message}`));
    req.on('end', () => {
      if (tooLarge) return;
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
        log.error(`${name} failed unexpectedly: ${err instanceof Error ? err.message : String(err)}`);
        refuse(res, 500, 'internal error');
      }
    });
  };
}
