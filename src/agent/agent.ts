// `pilot-agent proxy`: loads ProxyConfig and the node identity, starts the local xDS proxy and the
// status server, writes the bootstrap, runs the data-plane proxy and supervises it:
// - the agent exits when the proxy exits, with its exit code (128 + signal number if killed);
// - on SIGTERM/SIGINT it asks the proxy to drain inbound listeners (admin POST
//   /drain_listeners?inboundonly&graceful), waits the termination drain duration so in-flight
//   requests finish, then stops the proxy with SIGTERM (SIGKILL if it does not exit in time) and
//   exits 0. A second signal skips the rest of the wait.
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { constants } from 'node:os';
import { dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setting } from '../common/env.js';
import { scope } from '../common/log.js';
import { programRegistry } from '../common/metrics.js';
import { create } from '@bufbuild/protobuf';
import { NameTableSchema } from '../gen/mesh/v1/dns_pb.js';
import type { DiscoveryResponse } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import { TypeUrl, unpack } from '../envoy/types.js';
import { DnsProxy } from './dns/dns-proxy.js';
import type { Bootstrap } from '../gen/envoy/config/bootstrap/v3/bootstrap_pb.js';
import { applyBootstrapOverride, bootstrapJson, buildBootstrap, renderTemplate, templateValues, type BootstrapInputs } from './bootstrap.js';
import { appScrapeConfig, type AppScrape } from './app-metrics.js';
import { parseAppProbers, type AppProbe } from './app-probes.js';
import { DEFAULT_ANNOTATIONS_FILE, loadProxyConfig, parseDownwardApiFile, proxyConfigJson, readOptional, type ProxyConfig } from './mesh-config.js';
import { loadNodeIdentity, type NodeIdentity, type ProxyType } from './node.js';
import { startWorkloadCerts, type WorkloadCerts } from './sds/workload-certs.js';
import { StatusServer } from './status.js';
import { StsServer } from './sts/sts-server.js';
import { CloudTokenExchange, type TokenManagerPlugin } from './sts/token-exchange.js';
import { healthCheckSpec } from './readiness-probe.js';
import { defaultProbeHost, WorkloadHealthChecker } from './workload-health.js';
import { xdsCredentials } from './xds-credentials.js';
import { XdsProxy } from './xds-proxy.js';
import { proxyNodeFlags, proxyProcessEnv } from '../dataplane/node-flags.js';

const log = scope('default');

export interface ProxyAgentOptions {
  /** `pilot-agent proxy [sidecar|router]`: the node id's type; default sidecar. */
  proxyType?: ProxyType;
  /** --meshConfig. */
  meshConfig: string;
  /** --concurrency; 0 = ProxyConfig.concurrency. */
  concurrency: number;
  /** --domain; empty = `<namespace>.svc.cluster.local`. */
  domain: string;
  /** --outlierLogPath; empty = none. */
  outlierLogPath: string;
  /** --proxyLogLevel, passed to the proxy as --log-level. */
  proxyLogLevel: string;
  /** --proxyComponentLogLevel, passed as --component-log-level. */
  proxyComponentLogLevel: string;
  /** --serviceCluster when given explicitly; absent = ProxyConfig.serviceCluster. */
  serviceCluster?: string;
  /** --templateFile; empty = the built-in bootstrap. */
  templateFile: string;
  /** Downward-API files; defaults ./etc/mesh/pod/annotations and ./etc/mesh/pod/labels. */
  annotationsFile?: string;
  labelsFile?: string;
  /** argv of the proxy before its flags; default from ProxyConfig.binaryPath. */
  proxyCommand?: readonly string[];
  /** The proxy's stdio; default inherit (its logs go where the agent's go). */
  proxyStdio?: StdioOptions;
  /** Host the status and metrics ports bind on; default all interfaces (probes come from outside). */
  statusHost?: string;
  /** Where MESH_META_* and the proxy's environment come from; default process.env. */
  env?: NodeJS.ProcessEnv;
  /** After SIGTERM to the proxy, how long before SIGKILL; default 10 s. */
  proxyStopTimeoutMs?: number;
  /** DNS proxy (DNS_CAPTURE): resolv.conf to forward with, default /etc/resolv.conf. */
  resolvConfPath?: string;
  /** DNS proxy port; default 15053, 0 = any free port. */
  dnsPort?: number;
  /** --stsPort; 0 = no STS server. */
  stsPort?: number;
  /** --tokenManagerPlugin. */
  tokenManagerPlugin?: TokenManagerPlugin;
}

/** This repository's root (bin/ lives there), from src/agent or dist/src/agent alike. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return dir;
}

/** The proxy's argv prefix: a .js binaryPath runs under this Node (with the proxy's Node flags); empty = bin/mesh-proxy.js. */
export function proxyCommandFor(binaryPath: string): string[] {
  const path = binaryPath || join(repoRoot(), 'bin', 'mesh-proxy.js');
  return /\.[cm]?js$/.test(path) ? [process.execPath, ...proxyNodeFlags(process.env), path] : [path];
}

/** The proxy's flags, Envoy-style (docs/cli.md). */
export function proxyArgs(bootstrapFile: string, pc: ProxyConfig, node: NodeIdentity, o: ProxyAgentOptions): string[] {
  return [
    '-c', bootstrapFile,
    '--concurrency', String(o.concurrency > 0 ? o.concurrency : pc.concurrency),
    '--log-level', o.proxyLogLevel,
    '--component-log-level', o.proxyComponentLogLevel,
    '--service-cluster', node.cluster,
    '--drain-time-s', String(Math.round(pc.drainDuration / 1000)),
  ];
}

function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  return 128 + (signal ? (constants.signals[signal] ?? 0) : 0);
}

export class ProxyAgent {
  private child?: ChildProcess;
  private xds?: XdsProxy;
  private dns?: DnsProxy;
  private status?: StatusServer;
  private health?: WorkloadHealthChecker;
  /** Workload certificates and the SDS server; undefined on the plaintext path (no CA root known). */
  certs?: WorkloadCerts;
  private sts?: StsServer;
  private stopping = false;
  private skipDrainWait?: () => void;
  private childExit?: Promise<number>;
  /** Set once the proxy is running: the effective config and what the proxy was given. */
  proxyConfig?: ProxyConfig;
  node?: NodeIdentity;
  bootstrapFile?: string;
  ports: { status?: number; metrics?: number; xds?: number; dns?: number; sts?: number } = {};

  constructor(private readonly opts: ProxyAgentOptions) {}

  private get env(): NodeJS.ProcessEnv {
    return this.opts.env ?? process.env;
  }

  /** Everything up to a running proxy; a user error (bad config) rejects with a message naming it. */
  async start(): Promise<void> {
    const o = this.opts;
    const pc = await loadProxyConfig({ meshConfigFile: o.meshConfig, proxyConfigEnv: setting('PROXY_CONFIG'), annotationsFile: o.annotationsFile });
    this.proxyConfig = pc;
    const node = await loadNodeIdentity({ proxyType: o.proxyType ?? 'sidecar', proxyConfig: pc, domain: o.domain, serviceCluster: o.serviceCluster, labelsFile: o.labelsFile, env: this.env });
    this.node = node;
    const app = await this.appFacingConfig();
    log.info(`effective proxy config: ${JSON.stringify(proxyConfigJson(pc))}`);
    log.info(`proxy node ${node.id}; discovery address ${pc.discoveryAddress}`);

    this.certs = await startWorkloadCerts({ discoveryAddress: pc.discoveryAddress, namespace: node.namespace, serviceAccount: typeof node.metadata['SERVICE_ACCOUNT'] === 'string' ? node.metadata['SERVICE_ACCOUNT'] : undefined });
    const agentTypes = await this.startDnsProxy(node);
    let xdsAddress = pc.discoveryAddress;
    if (setting('PROXY_XDS_VIA_AGENT')) {
      const credentials = this.certs?.xdsCredentials ?? xdsCredentials(pc.discoveryAddress);
      this.xds = new XdsProxy({ upstreamAddress: pc.discoveryAddress, listenAddress: `127.0.0.1:${pc.xdsProxyPort}`, credentials, agentTypes });
      this.ports.xds = await this.xds.start();
      xdsAddress = `127.0.0.1:${this.ports.xds}`;
      log.info(`xDS proxy listening on ${xdsAddress}, relaying to ${pc.discoveryAddress}`);
    }

    const host = o.statusHost ?? '';
    const xds = this.xds;
    this.status = new StatusServer({
      statusAddress: `${host}:${pc.statusPort}`,
      ...(pc.metricsPort > 0 ? { metricsAddress: `${host}:${pc.metricsPort}` } : {}),
      adminUrl: `http://127.0.0.1:${pc.proxyAdminPort}`,
      ...(xds ? { xdsProgress: () => ({ listeners: xds.acked().has(TypeUrl.Listener), clusters: xds.acked().has(TypeUrl.Cluster) }) } : {}),
      registry: programRegistry('agent'),
      ...app,
      adminEndpoints: setting('ENABLE_ADMIN_ENDPOINTS'),
      quit: () => void this.shutdown('POST /quitquitquit'),
    });
    Object.assign(this.ports, await this.status.start());
    this.startHealthCheck(pc, node, this.status);

    await this.startSts();
    const inputs: BootstrapInputs = { node, proxyConfig: pc, xdsAddress, outlierLogPath: o.outlierLogPath, initialFetchTimeoutMs: setting('PILOT_INITIAL_FETCH_TIMEOUT'), ...(this.certs ? { sdsSocket: this.certs.sds.socketPath } : {}) };
    this.bootstrapFile = await this.writeBootstrap(inputs);
    // A signal during startup: do not start a proxy nobody will stop.
    if (this.stopping) {
      await this.closeServers();
      return;
    }
    this.spawnProxy(proxyCommandFor(pc.binaryPath), pc, node);
  }

  /**
   * With --stsPort, the token exchange server on localhost; its token endpoint (ours,
   * MESH_STS_TOKEN_ENDPOINT) is required, since without one no exchange could succeed.
   */
  private async startSts(): Promise<void> {
    const port = this.opts.stsPort ?? 0;
    if (port === 0) return;
    const endpoint = this.env['MESH_STS_TOKEN_ENDPOINT'] ?? '';
    if (!/^https?:\/\//.test(endpoint)) throw new Error(`--stsPort ${port} needs MESH_STS_TOKEN_ENDPOINT, the OAuth 2.0 token endpoint (http:// or https:// URL) the ${this.opts.tokenManagerPlugin ?? 'CloudTokenExchange'} plugin exchanges tokens at; got ${JSON.stringify(endpoint)}`);
    this.sts = new StsServer(new CloudTokenExchange({ endpoint }));
    this.ports.sts = await this.sts.start(port);
    log.info(`STS server listening on 127.0.0.1:${this.ports.sts}, exchanging tokens at ${endpoint}`);
  }

  /**
   * With ProxyConfig.readinessProbe, the workload health checker; its reports go over the agent's
   * upstream xDS stream, so without the xDS proxy there is nowhere to send them.
   */
  private startHealthCheck(pc: ProxyConfig, node: NodeIdentity, status: StatusServer): void {
    if (!pc.readinessProbe) return;
    const xds = this.xds;
    if (!xds) {
      log.warn('readinessProbe is not effective without PROXY_XDS_VIA_AGENT=true: workload health is reported over the agent\'s upstream xDS stream');
      return;
    }
    this.health = new WorkloadHealthChecker({
      spec: healthCheckSpec(pc.readinessProbe),
      defaultHost: defaultProbeHost(String(node.metadata['INSTANCE_IPS'] ?? '').split(',')),
      proxyReady: () => status.notReadyReason(),
      report: (r) => xds.reportHealth(r),
    });
    this.health.start();
  }

  /** What the status server does for the application: its metrics scrape and its probes; read before anything starts. */
  private async appFacingConfig(): Promise<{ appScrape?: AppScrape; appProbes: Map<string, AppProbe> }> {
    const file = this.opts.annotationsFile ?? DEFAULT_ANNOTATIONS_FILE;
    const text = await readOptional(file);
    const appScrape = appScrapeConfig(setting('MESH_METRICS_ANNOTATIONS'), text === undefined ? {} : parseDownwardApiFile(text, file));
    return { ...(appScrape ? { appScrape } : {}), appProbes: parseAppProbers(setting('MESH_APP_PROBERS')) };
  }

  /**
   * With DNS_CAPTURE, the DNS proxy on :15053 and the name table subscription that feeds it (over
   * the agent's xDS relay, as the Go mesh's agent takes it). Returns the agent's own xDS types.
   */
  private async startDnsProxy(node: NodeIdentity): Promise<Map<string, (res: DiscoveryResponse) => void>> {
    if (node.metadata['DNS_CAPTURE'] !== 'true') return new Map();
    if (!setting('PROXY_XDS_VIA_AGENT')) {
      log.warn('DNS capture needs PROXY_XDS_VIA_AGENT=true to receive the name table: the DNS proxy is not started');
      return new Map();
    }
    const dns = new DnsProxy({ namespace: node.namespace, domain: node.domain, resolvConfPath: this.opts.resolvConfPath, port: this.opts.dnsPort });
    this.dns = dns;
    this.ports.dns = await dns.start();
    // No resource is an empty table (the discovery server sends none to a proxy it serves no names).
    const apply = (res: DiscoveryResponse) => dns.update(res.resources[0] ? unpack(res.resources[0], NameTableSchema) : create(NameTableSchema));
    return new Map([[TypeUrl.NameTable, apply]]);
  }

  private async writeBootstrap(inputs: BootstrapInputs): Promise<string> {
    const o = this.opts;
    let text: string;
    let ext = '.json';
    if (o.templateFile) {
      const template = await readFile(o.templateFile, 'utf8').catch((e: Error) => {
        throw new Error(`--templateFile ${o.templateFile}: ${e.message}`);
      });
      text = renderTemplate(template, templateValues(inputs), o.templateFile);
      if (['.yaml', '.yml'].includes(extname(o.templateFile))) ext = '.yaml';
      if (setting('MESH_BOOTSTRAP_OVERRIDE')) log.warn('MESH_BOOTSTRAP_OVERRIDE is not applied with --templateFile: the template is the whole bootstrap');
    } else {
      text = bootstrapJson(await this.withOverride(buildBootstrap(inputs)));
    }
    const file = resolve(inputs.proxyConfig.configPath, `mesh-proxy-rev${ext}`);
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, text);
    log.info(`bootstrap written to ${file}`);
    return file;
  }

  /** The generated bootstrap with MESH_BOOTSTRAP_OVERRIDE merged over it, when set. */
  private async withOverride(generated: Bootstrap): Promise<Bootstrap> {
    const file = setting('MESH_BOOTSTRAP_OVERRIDE');
    if (!file) return generated;
    const text = await readFile(file, 'utf8').catch((e: Error) => {
      throw new Error(`MESH_BOOTSTRAP_OVERRIDE ${file}: ${e.message}`);
    });
    log.info(`merging the bootstrap override ${file}`);
    return applyBootstrapOverride(generated, text, file);
  }

  private spawnProxy(command: readonly string[], pc: ProxyConfig, node: NodeIdentity): void {
    const argv = [...(this.opts.proxyCommand ?? command), ...proxyArgs(this.bootstrapFile!, pc, node, this.opts)];
    log.info(`starting proxy: ${argv.join(' ')}`);
    const child = spawn(argv[0]!, argv.slice(1), { stdio: this.opts.proxyStdio ?? 'inherit', env: proxyProcessEnv(this.env) });
    this.child = child;
    this.childExit = new Promise((resolveExit) => {
      child.once('error', (e) => {
        log.error(`cannot start the proxy ${argv[0]}: ${e.message}`);
        resolveExit(127);
      });
      child.once('exit', (code, signal) => {
        const c = exitCodeOf(code, signal);
        if (!this.stopping) log.warn(`proxy exited with ${signal ? `signal ${signal}` : `code ${code}`}; the agent exits too`);
        resolveExit(c);
      });
    });
  }

  /** Resolves to the agent's exit code once the proxy has exited and the agent's servers closed. */
  async wait(): Promise<number> {
    const code = await (this.childExit ?? Promise.resolve(1));
    this.skipDrainWait?.();
    await this.closeServers();
    return this.stopping ? 0 : code;
  }

  /** Drains the proxy, waits the termination drain duration, then stops it. */
  async shutdown(signal: string): Promise<void> {
    if (this.stopping) {
      log.info(`${signal} again: stopping the proxy now`);
      this.skipDrainWait?.();
      return;
    }
    this.stopping = true;
    const pc = this.proxyConfig;
    const child = this.child;
    if (!pc || !child || child.exitCode !== null || child.signalCode !== null) {
      await this.closeServers();
      return;
    }
    const drainMs = this.env['TERMINATION_DRAIN_DURATION_SECONDS'] !== undefined ? setting('TERMINATION_DRAIN_DURATION_SECONDS') * 1000 : pc.terminationDrainDuration;
    log.info(`${signal} received: draining inbound listeners, stopping the proxy in ${drainMs / 1000}s`);
    await this.drainListeners(pc.proxyAdminPort);
    await new Promise<void>((done) => {
      const timer = setTimeout(done, drainMs);
      this.skipDrainWait = () => {
        clearTimeout(timer);
        done();
      };
      void this.childExit?.then(() => this.skipDrainWait?.());
    });
    if (child.exitCode === null && child.signalCode === null) {
      log.info('drain period over: stopping the proxy');
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), this.opts.proxyStopTimeoutMs ?? 10_000);
      await this.childExit;
      clearTimeout(kill);
    }
  }

  private async drainListeners(adminPort: number): Promise<void> {
    try {
      // A gateway's listeners all take traffic from outside: it drains them all, as in the Go mesh.
      const inboundOnly = (this.opts.proxyType ?? 'sidecar') === 'sidecar' ? 'inboundonly&' : '';
      const res = await fetch(`http://127.0.0.1:${adminPort}/drain_listeners?${inboundOnly}graceful`, { method: 'POST', signal: AbortSignal.timeout(2000) });
      await res.body?.cancel();
      if (res.status !== 200) log.warn(`proxy admin /drain_listeners answered ${res.status}`);
    } catch (e) {
      log.warn(`cannot ask the proxy to drain: ${(e as Error).message}`);
    }
  }

  private async closeServers(): Promise<void> {
    this.health?.stop();
    this.health = undefined;
    this.xds?.close();
    this.xds = undefined;
    this.dns?.close();
    this.dns = undefined;
    this.certs?.close();
    this.certs = undefined;
    await this.sts?.close();
    this.sts = undefined;
    const status = this.status;
    this.status = undefined;
    await status?.close();
  }
}

/**
 * `pilot-agent proxy`: runs the agent until the proxy exits; SIGTERM/SIGINT drain and stop it.
 * Resolves to the process exit code.
 */
export async function runProxyAgent(opts: ProxyAgentOptions): Promise<number> {
  const agent = new ProxyAgent(opts);
  const onSignal = (sig: NodeJS.Signals) => void agent.shutdown(sig);
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  try {
    try {
      await agent.start();
    } catch (e) {
      await agent.shutdown('startup failure');
      throw e;
    }
    return await agent.wait();
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}
