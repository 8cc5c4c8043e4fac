// The agent's Security Token Service on `--stsPort` (localhost only): an RFC 8693 token exchange
// endpoint at `/token` for the workload's own clients (e.g. a telemetry exporter), answering
// errors as RFC 6749 section 5.2 says (400, JSON `error` / `error_description`, no caching).
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { scope } from '../../common/log.js';
import { closeServer, httpServer, listen, Mux, readBody } from '../../debug/http.js';
import { ExchangeRejected, TOKEN_EXCHANGE_GRANT, type ExchangeRequest, type TokenManager } from './token-exchange.js';

const log = scope('stsserver');

export const STS_PATH = '/token';
/** Subject token types the exchange accepts: the workload's JWT. */
const SUBJECT_TOKEN_TYPES = new Set(['urn:ietf:params:oauth:token-type:jwt', 'urn:ietf:params:oauth:token-type:id_token', 'urn:ietf:params:oauth:token-type:access_token']);

function send(res: ServerResponse, status: number, body: object): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', pragma: 'no-cache', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

const oauthError = (res: ServerResponse, error: string, description: string, status = 400) => send(res, status, { error, error_description: description });

/** The exchange request from a form body, or the OAuth error to answer. */
export function parseExchange(contentType: string | undefined, body: string): ExchangeRequest | { error: string; description: string } {
  if (!(contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded')) {
    return { error: 'invalid_request', description: 'content type must be application/x-www-form-urlencoded' };
  }
  const form = new URLSearchParams(body);
  for (const [k] of form) {
    if (form.getAll(k).length > 1) return { error: 'invalid_request', description: `parameter ${k} is repeated` };
  }
  const grant = form.get('grant_type');
  if (!grant) return { error: 'invalid_request', description: 'grant_type is missing' };
  if (grant !== TOKEN_EXCHANGE_GRANT) return { error: 'unsupported_grant_type', description: `grant_type ${grant} is not supported; use ${TOKEN_EXCHANGE_GRANT}` };
  const subjectToken = form.get('subject_token');
  if (!subjectToken) return { error: 'invalid_request', description: 'subject_token is missing' };
  const subjectTokenType = form.get('subject_token_type');
  if (!subjectTokenType) return { error: 'invalid_request', description: 'subject_token_type is missing' };
  if (!SUBJECT_TOKEN_TYPES.has(subjectTokenType)) return { error: 'invalid_request', description: `subject_token_type ${subjectTokenType} is not supported` };
  if (form.get('actor_token') || form.get('actor_token_type')) return { error: 'invalid_request', description: 'delegation (actor_token) is not supported' };
  const opt = (k: string) => form.get(k) || undefined;
  return { subjectToken, subjectTokenType, audience: opt('audience'), scope: opt('scope'), requestedTokenType: opt('requested_token_type') };
}

export class StsServer {
  private server?: Server;

  constructor(private readonly manager: TokenManager) {}

  /** Listens on localhost:port; resolves to the port. */
  async start(port: number): Promise<number> {
    const mux = new Mux().handle(STS_PATH, 'RFC 8693 token exchange (POST, form)', (req, res) => this.serve(req, res));
    this.server = httpServer(mux);
    return (await listen(this.server, `127.0.0.1:${port}`)).port;
  }

  async close(): Promise<void> {
    if (this.server) await closeServer(this.server);
    this.server = undefined;
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      oauthError(res, 'invalid_request', `method ${req.method} is not allowed; use POST`, 405);
      return;
    }
    const parsed = parseExchange(req.headers['content-type'], await readBody(req, 64 * 1024));
    if ('error' in parsed) {
      log.debug(`refused token exchange: ${parsed.error}: ${parsed.description}`);
      oauthError(res, parsed.error, parsed.description);
      return;
    }
    try {
      send(res, 200, await this.manager.exchange(parsed));
    } catch (e) {
      if (e instanceof ExchangeRejected) {
        oauthError(res, e.error, e.description, e.status);
        return;
      }
      log.error(`token exchange failed: ${(e as Error).message}`);
      oauthError(res, 'server_error', (e as Error).message, 500);
    }
  }
}
