// The token manager behind the agent's STS server (`--tokenManagerPlugin`). `CloudTokenExchange`
// exchanges the workload's token at an OAuth 2.0 token endpoint (RFC 8693), as the Go mesh's
// plugin does at its cloud's STS; the endpoint is configured by MESH_STS_TOKEN_ENDPOINT (ours: the
// Go mesh hard-codes its cloud's). Network errors and 5xx answers are retried; a 4xx is the
// endpoint's verdict on the token and is passed on.
import { scope } from '../../common/log.js';
import { counter } from '../../common/metrics.js';

const log = scope('stsclient');

export const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
export const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
export const TOKEN_MANAGER_PLUGINS = ['CloudTokenExchange'] as const;
export type TokenManagerPlugin = (typeof TOKEN_MANAGER_PLUGINS)[number];

export interface ExchangeRequest {
  subjectToken: string;
  subjectTokenType: string;
  audience?: string;
  scope?: string;
  requestedTokenType?: string;
}

export interface IssuedToken {
  access_token: string;
  issued_token_type: string;
  token_type: string;
  expires_in?: number;
}

/** An answer of the token endpoint to pass on to the caller: its status and OAuth error. */
export class ExchangeRejected extends Error {
  constructor(readonly status: number, readonly error: string, readonly description: string) {
    super(`${error}: ${description}`);
  }
}

export interface TokenManager {
  exchange(req: ExchangeRequest): Promise<IssuedToken>;
}

export interface CloudTokenExchangeOptions {
  endpoint: string;
  /** Attempts after the first on network errors and 5xx; default 2. */
  retries?: number;
  timeoutMs?: number;
}

const REQUEST_TYPE = { request_type: 'token_exchange' };

export class CloudTokenExchange implements TokenManager {
  constructor(private readonly o: CloudTokenExchangeOptions) {}

  async exchange(req: ExchangeRequest): Promise<IssuedToken> {
    const body = new URLSearchParams({ grant_type: TOKEN_EXCHANGE_GRANT, subject_token: req.subjectToken, subject_token_type: req.subjectTokenType, requested_token_type: req.requestedTokenType ?? ACCESS_TOKEN_TYPE });
    if (req.audience) body.set('audience', req.audience);
    if (req.scope) body.set('scope', req.scope);
    const retries = this.o.retries ?? 2;
    let lastError = '';
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (attempt > 0) {
        counter('num_outgoing_retries').inc(REQUEST_TYPE);
        await new Promise((r) => setTimeout(r, 100 * 2 ** (attempt - 1)));
      }
      counter('num_outgoing_requests').inc(REQUEST_TYPE);
      const started = performance.now();
      try {
        const res = await fetch(this.o.endpoint, { method: 'POST', body, signal: AbortSignal.timeout(this.o.timeoutMs ?? 5000) });
        const text = await res.text();
        counter('outgoing_latency').inc(REQUEST_TYPE, performance.now() - started);
        if (res.status === 200) return issuedToken(text, this.o.endpoint);
        counter('num_failed_outgoing_requests').inc(REQUEST_TYPE);
        if (res.status < 500) throw rejected(res.status, text);
        lastError = `HTTP ${res.status}`;
      } catch (e) {
        if (e instanceof ExchangeRejected) throw e;
        counter('num_failed_outgoing_requests').inc(REQUEST_TYPE);
        lastError = (e as Error & { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
      }
      log.warn(`token exchange at ${this.o.endpoint} failed (attempt ${attempt + 1} of ${retries + 1}): ${lastError}`);
    }
    throw new Error(`token exchange at ${this.o.endpoint} failed: ${lastError}`);
  }
}

function rejected(status: number, text: string): ExchangeRejected {
  let doc: { error?: unknown; error_description?: unknown } = {};
  try {
    doc = JSON.parse(text) as typeof doc;
  } catch {
    // Not an OAuth error body: the status alone says it.
  }
  return new ExchangeRejected(400, typeof doc.error === 'string' ? doc.error : 'invalid_grant', typeof doc.error_description === 'string' ? doc.error_description : `the token endpoint answered ${status}`);
}

function issuedToken(text: string, endpoint: string): IssuedToken {
  const doc = JSON.parse(text) as Partial<IssuedToken>;
  if (typeof doc.access_token !== 'string' || doc.access_token === '') throw new Error(`${endpoint} answered 200 without an access_token`);
  return {
    access_token: doc.access_token,
    issued_token_type: doc.issued_token_type ?? ACCESS_TOKEN_TYPE,
    token_type: doc.token_type ?? 'Bearer',
    ...(typeof doc.expires_in === 'number' ? { expires_in: doc.expires_in } : {}),
  };
}
