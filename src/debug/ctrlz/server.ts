// The introspection facility (the Go mesh's ControlZ) of both programs, on --ctrlz_address:
// --ctrlz_port: a web page and the JSON API behind it. Like the Go mesh, a port it cannot bind is a
// warning, not a failed start: introspection must never keep the program from serving.
import { createServer, type Server } from 'node:http';
import { scope } from '../../common/log.js';
import { closeServer, formatAddress, listen, sendText } from '../http.js';
import { serveApi, type CtrlzSources } from './api.js';
import { INDEX_HTML, SCRIPT_JS, STYLE_CSS } from './page.js';
import { ProcessSampler } from './process-info.js';

const log = scope('default');

export type CtrlzOptions = Omit<CtrlzSources, 'sampler'> & {
  /** `--ctrlz_address`: a host name or IP; `*` listens on every address. */
  readonly address: string;
  readonly port: number;
};

const ASSETS: Record<string, { type: string; body: string }> = {
  '/': { type: 'text/html; charset=utf-8', body: INDEX_HTML },
  '/ctrlz.css': { type: 'text/css; charset=utf-8', body: STYLE_CSS },
  '/ctrlz.js': { type: 'text/javascript; charset=utf-8', body: SCRIPT_JS },
};

/** `--ctrlz_address` and `--ctrlz_port` as a listen address (`*` -> every address). */
export function ctrlzListenAddress(address: string, port: number): string {
  if (address === '*' || address === '') return `:${port}`;
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

export class CtrlzServer {
  private readonly sampler = new ProcessSampler();
  private readonly server: Server;
  /** The bound address, once started. */
  address: string | undefined;

  constructor(private readonly opts: CtrlzOptions) {
    const sources: CtrlzSources = { ...opts, sampler: this.sampler };
    this.server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      serveApi(sources, req, res, url)
        .then((handled) => {
          if (handled) return;
          const asset = ASSETS[url.pathname];
          if (!asset) sendText(res, 404, `404 page not found: ${url.pathname}\n`);
          else if (req.method !== 'GET' && req.method !== 'HEAD') sendText(res, 405, `${url.pathname}: use GET\n`);
          else sendText(res, 200, asset.body, asset.type);
        })
        .catch((e: unknown) => {
          if (!res.headersSent) sendText(res, 500, `internal error serving ${url.pathname}: ${(e as Error).message}\n`);
          else res.destroy();
        });
    });
  }

  /** Binds; a failure is logged and leaves the facility off (returns false). */
  async start(): Promise<boolean> {
    const addr = ctrlzListenAddress(this.opts.address, this.opts.port);
    try {
      this.address = formatAddress(await listen(this.server, addr));
    } catch (e) {
      log.warn(`unable to start the introspection facility (ControlZ): ${(e as Error).message}`);
      this.sampler.close();
      return false;
    }
    log.info(`introspection facility (ControlZ) listening on http://${this.address}/`);
    return true;
  }

  async close(): Promise<void> {
    this.sampler.close();
    if (this.server.listening) await closeServer(this.server);
  }
}
