// The HTTPS server of the webhooks (--httpsAddr, default :15017). It serves what is registered with
// `route()` (validation today, injection later) with the certificate from --tlsCertFile and
// --tlsKeyFile, or a self-signed one for the service's DNS names.

import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ROOT_NAMESPACE } from '../api/types.js';
import { settingDefault } from '../common/env.js';
import { scope } from '../common/log.js';
import { selfSignedCertificate } from './selfsigned.js';

const log = scope('validationServer');

export type RouteHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface WebhookServerOptions {
  /** `host:port` or `:port` (all interfaces). */
  httpsAddr: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  /** Service the orchestrator calls; names the self-signed certificate. Default `meshd`. */
  serviceName?: string;
  /** Namespace of that service. Default the root namespace. */
  namespace?: string;
  /** Extra DNS name for the self-signed certificate; defaults to MESHD_CUSTOM_HOST. */
  customHost?: string;
}

/** Splits `host:port`, `:port` or `[v6]:port`; throws a message naming the flag on bad input. */
export function parseAddress(address: string): { host: string | undefined; port: number } {
  const match = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(address);
  const port = Number(match?.[3]);
  if (!match || port > 65535) throw new Error(`--httpsAddr ${JSON.stringify(address)}: expected [host]:port, e.g. :15017`);
  const host = match[1] ?? match[2];
  return { host: host === '' ? undefined : host, port };
}

export function serviceDnsNames(options: Pick<WebhookServerOptions, 'serviceName' | 'namespace' | 'customHost'>): string[] {
  const service = options.serviceName ?? 'meshd';
  const namespace = options.namespace ?? ROOT_NAMESPACE;
  const names = [`${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`, `${service}.${namespace}`, service];
  if (options.customHost) names.push(options.customHost);
  return names;
}

export class WebhookServer {
  private readonly routes = new Map<string, RouteHandler>();
  private server: Server | undefined;
  private certPem = '';

  constructor(private readonly options: WebhookServerOptions) {}

  route(path: string, handler: RouteHandler): void {
    this.routes.set(path, handler);
  }

  async start(): Promise<void> {
    const { host, port } = parseAddress(this.options.httpsAddr);
    const { certPem, keyPem } = await this.certificate();
    this.certPem = certPem;
    const server = createServer({ cert: certPem, key: keyPem }, (req, res) => this.dispatch(req, res));
    // A TLS handshake failure or a client hanging up is the client's problem, not a crash.
    server.on('tlsClientError', (err) => log.debug(`webhook TLS client error: ${err.message}`));
    server.on('clientError', (err, socket) => {
      log.debug(`webhook client error: ${err.message}`);
      socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    log.info(`webhook server listening on ${this.options.httpsAddr} (port ${this.port()}), paths ${[...this.routes.keys()].join(', ') || '(none)'}`);
  }

  port(): number {
    return (this.server?.address() as AddressInfo | null)?.port ?? 0;
  }

  /** The serving certificate (PEM), e.g. for the CA bundle of the webhook configuration. */
  certificatePem(): string {
    return this.certPem;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async certificate(): Promise<{ certPem: string; keyPem: string }> {
    const { tlsCertFile, tlsKeyFile } = this.options;
    if (tlsCertFile && tlsKeyFile) {
      return { certPem: await readFile(tlsCertFile, 'utf8'), keyPem: await readFile(tlsKeyFile, 'utf8') };
    }
    if (tlsCertFile || tlsKeyFile) throw new Error('--tlsCertFile and --tlsKeyFile must be given together');
    const names = serviceDnsNames({ ...this.options, customHost: this.options.customHost ?? settingDefault('MESHD_CUSTOM_HOST') });
    log.info(`no --tlsCertFile/--tlsKeyFile: serving a self-signed certificate for ${names.join(', ')}`);
    return selfSignedCertificate(names);
  }

  private dispatch(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0]!;
    const handler = this.routes.get(path);
    if (!handler) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`no handler for ${path}\n`);
      return;
    }
    try {
      handler(req, res);
    } catch (err) {
      log.error(`webhook ${path} failed: ${err instanceof Error ? err.message : String(err)}`);
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error\n');
    }
  }
}
