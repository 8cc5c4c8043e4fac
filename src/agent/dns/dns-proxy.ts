// The agent's DNS proxy (DNS_CAPTURE): resolv.conf read once at start, the name table replaced on
// every NDS update, and the server answering on 127.0.0.1:15053 UDP and TCP.
import { readFile } from 'node:fs/promises';
import { scope } from '../../common/log.js';
import type { NameTable } from '../../gen/mesh/v1/dns_pb.js';
import { DnsForwarder } from './forwarder.js';
import { parseResolvConf, type ResolvConf } from './resolv-conf.js';
import { DnsResolver } from './resolver.js';
import { DnsServer } from './server.js';
import { LookupTable } from './table.js';

const log = scope('dns');

export const DNS_PROXY_PORT = 15053;

export interface DnsProxyOptions {
  /** The proxy's namespace and DNS domain (node.id's last part), for short names. */
  readonly namespace: string;
  readonly domain: string;
  /** Default /etc/resolv.conf. */
  readonly resolvConfPath?: string;
  readonly host?: string;
  /** Default 15053; 0 = any free port. */
  readonly port?: number;
}

export class DnsProxy {
  private server?: DnsServer;
  private resolver?: DnsResolver;
  private conf?: ResolvConf;

  constructor(private readonly opts: DnsProxyOptions) {}

  /** Reads resolv.conf and binds; a missing or bad resolv.conf rejects with a message naming it. */
  async start(): Promise<number> {
    const path = this.opts.resolvConfPath ?? '/etc/resolv.conf';
    const text = await readFile(path, 'utf8').catch((e: Error) => {
      throw new Error(`DNS proxy: cannot read ${path}: ${e.message}`);
    });
    const conf = parseResolvConf(text, path);
    if (conf.servers.length === 0) log.warn(`${path} names no nameserver: names outside the mesh will fail (SERVFAIL)`);
    this.conf = conf;
    this.resolver = new DnsResolver(new DnsForwarder(conf));
    this.server = new DnsServer(this.resolver, this.opts.host ?? '127.0.0.1', this.opts.port ?? DNS_PROXY_PORT);
    const port = await this.server.start();
    log.info(`upstream resolvers ${conf.servers.map((s) => s.host).join(', ') || '(none)'}; search ${conf.search.join(' ') || '(none)'}`);
    return port;
  }

  /** Whether a name table has arrived (until then mesh and other names alike get SERVFAIL). */
  get ready(): boolean {
    return this.resolver?.ready ?? false;
  }

  update(table: NameTable): void {
    if (!this.resolver || !this.conf) return;
    const lookup = new LookupTable(table, { namespace: this.opts.namespace, domain: this.opts.domain, search: this.conf.search });
    this.resolver.update(lookup);
    log.info(`name table updated: ${Object.keys(table.table).length} hosts, ${lookup.size} names`);
  }

  close(): void {
    this.server?.close();
    this.server = undefined;
  }
}
