// The local mesh in one command (`npm start`, `npm start -- --issuer`, `npm start -- --gateway`): the
// discovery server on a config directory, the sample httpbin app, and a pilot-agent (with its
// mesh-proxy) in front of the app on an explicit inbound port; with `client`, a second workload
// (`sleep`) whose sidecar calls the app's service over mesh mTLS; optionally a sample JWT issuer
// and an ingress gateway (`pilot-agent proxy router`). No orchestrator, no root.
//
// The config directory is a copy under the state directory (default .mesh-local/), seeded from
// samples/mesh on every start, so that trying policies never edits the repository: drop a file from
// samples/policies into it and the proxy applies it the moment the file is saved.
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startHttpbin } from './apps/httpbin.js';
import { startIssuer } from './apps/issuer.js';
import { seedConfig, writeGatewayConfig, writeIssuerPolicy } from './local-mesh-config.js';
import { freePort } from './ports.js';
import { program, stopChild, untilReady, type Judge } from './programs.js';

export { freePort };

export interface LocalMeshPorts {
  grpc: number;
  /** The secured gRPC port (TLS xDS and the CA). */
  secureGrpc: number;
  http: number;
  monitoring: number;
  webhook: number;
  app: number;
  /** The service port clients use; the proxy's outbound listener binds 127.0.0.1 on it. */
  service: number;
  inbound: number;
  issuer: number;
  status: number;
  admin: number;
  metrics: number;
  /** The ingress gateway's HTTP port (the sample Gateway's server port), its readiness and admin ports. */
  gateway: number;
  gatewayStatus: number;
  gatewayAdmin: number;
  /** The client workload's (`sleep`) readiness and admin ports. */
  clientStatus: number;
  clientAdmin: number;
}

/** The documented ports; tests pass free ones. */
export const DEFAULT_PORTS: LocalMeshPorts = { grpc: 15010, secureGrpc: 15012, http: 8080, monitoring: 15014, webhook: 15017, app: 8000, service: 9080, inbound: 15080, issuer: 8899, status: 15021, admin: 15000, metrics: 15020, gateway: 8088, gatewayStatus: 15121, gatewayAdmin: 15100, clientStatus: 15221, clientAdmin: 15200 };

export interface LocalMeshOptions {
  stateDir: string;
  issuer?: boolean;
  /**
   * Workload identity: the agent gets a certificate from the discovery server's CA (authenticated
   * by a token of the sample issuer) and connects to the secured port with it. Default: the
   * plaintext port and no certificates.
   */
  secure?: boolean;
  ports?: Partial<LocalMeshPorts>;
  /** An ingress gateway in front of the app, with samples/gateway's Gateway and VirtualService. */
  gateway?: boolean;
  /**
   * A client workload (namespace and service account `sleep`) whose sidecar owns the service's
   * outbound port and reaches the app through the app's sidecar: the service's endpoint becomes
   * that sidecar's inbound port, labelled for auto mTLS. Needs `secure` for the mTLS (without
   * certificates both hops are plaintext).
   */
  client?: boolean;
  /** The proxy's workers (ProxyConfig concurrency); default that of ProxyConfig, 2. */
  proxyConcurrency?: number;
  /** `pipe` collects the programs' output (see LocalMesh.output); default: this process's stdout/stderr. */
  output?: 'inherit' | 'pipe';
  /** Mesh config YAML for pilot-discovery (`--meshConfig`); default: none (the default mesh). */
  meshConfig?: string;
  /**
   * Every proxy writes the Go mesh's access log lines to `<stateDir>/access.log` (mesh config
   * accessLogFile), and the mesh config has a `json-file` provider (`<stateDir>/access.json.log`,
   * default JSON fields) for Telemetry resources; `meshConfig` must then not set extensionProviders.
   */
  accessLog?: boolean;
}

export interface LocalMesh {
  readonly ports: LocalMeshPorts;
  readonly configDir: string;
  readonly issuerUrl?: string;
  readonly agent: ChildProcess;
  /** httpbin's WorkloadEntry is health-checked by its agent (with workload identity). */
  readonly healthChecked: boolean;
  /** The client workload's (`sleep`) agent, with `client`. */
  readonly clientAgent?: ChildProcess;
  /** The gateway's agent, with `gateway`. */
  readonly gatewayAgent?: ChildProcess;
  /** The discovery server's current process. */
  discovery(): ChildProcess;
  /** Stops the discovery server; the proxy keeps serving its last config. */
  stopDiscovery(): Promise<void>;
  /** Starts the discovery server again on the same ports and config. */
  startDiscovery(): Promise<void>;
  /** Stops the sample issuer (its keys stay with the proxies that already have them). */
  stopIssuer(): Promise<void>;
  /** The file every proxy's access log lines go to, with `accessLog`. */
  readonly accessLogFile?: string;
  /** The `json-file` provider's file, with `accessLog`: where a Telemetry naming it sends lines. */
  readonly jsonAccessLogFile?: string;
  /** Everything the programs printed, with `output: 'pipe'`. */
  output(): string;
  stop(): Promise<void>;
}

/** A free loopback port for every role, for tests and benchmarks that run a whole mesh. */
export async function freePorts(): Promise<LocalMeshPorts> {
  const out = { ...DEFAULT_PORTS };
  for (const name of Object.keys(out) as Array<keyof LocalMeshPorts>) out[name] = await freePort();
  return out;
}

/** The token the sample issuer mints for a workload's service account (audience mesh-ca), where JWT_POLICY=third-party-jwt looks for it. */
async function writeWorkloadToken(agentDir: string, issuerUrl: string, account: string): Promise<void> {
  const q = new URLSearchParams({ sub: `system:serviceaccount:${account}`, aud: 'mesh-ca', exp: '24h' });
  const res = await fetch(`${issuerUrl}/token?${q}`);
  if (res.status !== 200) throw new Error(`the sample issuer did not mint a workload token: HTTP ${res.status}`);
  const tokenFile = join(agentDir, 'var', 'run', 'secrets', 'tokens', 'mesh-token');
  mkdirSync(dirname(tokenFile), { recursive: true });
  writeFileSync(tokenFile, (await res.text()).trim(), { mode: 0o600 });
}

/** How often the local mesh re-mints the workloads' 24 h tokens, as the orchestrator's kubelet rotates projected tokens. */
const TOKEN_REFRESH_MS = 6 * 3600_000;

/**
 * The agent's side of workload identity: its token, re-minted every TOKEN_REFRESH_MS (the agent
 * authenticates renewals with it too), and the CA root it trusts on the secured port.
 */
async function workloadIdentityEnv(agentDir: string, issuerUrl: string, rootFile: string, refreshers: Array<() => Promise<void>>, account = 'default:httpbin'): Promise<NodeJS.ProcessEnv> {
  const mint = () => writeWorkloadToken(agentDir, issuerUrl, account);
  await mint();
  refreshers.push(mint);
  return { XDS_ROOT_CA: rootFile };
}

/**
 * `pilot-agent proxy router` in mesh-system, labelled as the sample Gateway selects it (`app`) and
 * as the Gateways generated from orchestrator Ingresses select by default (`mesh: ingressgateway`), with ports of its own.
 */
function startGatewayAgent(dir: string, ports: LocalMeshPorts, sidecarConfig: Record<string, unknown>, secureEnv: NodeJS.ProcessEnv, sink: string[] | undefined): ChildProcess {
  mkdirSync(join(dir, 'etc', 'mesh', 'pod'), { recursive: true });
  writeFileSync(join(dir, 'etc', 'mesh', 'pod', 'labels'), 'app="ingressgateway"\nmesh="ingressgateway"\n');
  const proxyConfig = { ...sidecarConfig, proxyAdminPort: ports.gatewayAdmin, statusPort: ports.gatewayStatus, metricsPort: 0, configPath: join(dir, 'proxy') };
  return program('pilot-agent', ['proxy', 'router'], {
    cwd: dir,
    ...(sink ? { sink } : {}),
    env: { POD_NAME: 'ingressgateway-1', POD_NAMESPACE: 'mesh-system', INSTANCE_IP: '127.0.0.2', SERVICE_ACCOUNT: 'ingressgateway', MESH_META_WORKLOAD_NAME: 'ingressgateway', PROXY_CONFIG: JSON.stringify(proxyConfig), ...secureEnv },
  });
}

/**
 * `pilot-agent proxy` for the client workload `sleep` (its own namespace and service account), on
 * another loopback address so that the app's WorkloadEntry is not its own instance.
 */
function startClientAgent(dir: string, ports: LocalMeshPorts, sidecarConfig: Record<string, unknown>, secureEnv: NodeJS.ProcessEnv, sink: string[] | undefined): ChildProcess {
  mkdirSync(join(dir, 'etc', 'mesh', 'pod'), { recursive: true });
  writeFileSync(join(dir, 'etc', 'mesh', 'pod', 'labels'), 'app="sleep"\nversion="v1"\n');
  const proxyConfig = { ...sidecarConfig, proxyAdminPort: ports.clientAdmin, statusPort: ports.clientStatus, metricsPort: 0, configPath: join(dir, 'proxy') };
  return program('pilot-agent', ['proxy'], {
    cwd: dir,
    ...(sink ? { sink } : {}),
    env: { POD_NAME: 'sleep-1', POD_NAMESPACE: 'sleep', INSTANCE_IP: '127.0.0.2', SERVICE_ACCOUNT: 'sleep', MESH_META_WORKLOAD_NAME: 'sleep', PROXY_CONFIG: JSON.stringify(proxyConfig), ...secureEnv },
  });
}

export async function startLocalMesh(opts: LocalMeshOptions): Promise<LocalMesh> {
  const ports = { ...DEFAULT_PORTS, ...opts.ports };
  const sink = opts.output === 'pipe' ? ([] as string[]) : undefined;
  const state = resolve(opts.stateDir);
  const configDir = join(state, 'config');
  // With workload identity, httpbin's agent (its stream verified) reports the health of its entry.
  const healthChecked = opts.secure ?? false;
  seedConfig(configDir, ports, opts.client ?? false, healthChecked);
  const servers: Server[] = [(await startHttpbin(ports.app)).server];
  let issuerUrl: string | undefined;
  let issuerServer: Server | undefined;
  if (opts.issuer || opts.secure) {
    const issuer = await startIssuer(join(state, 'issuer-key.json'), ports.issuer);
    issuerServer = issuer.server;
    servers.push(issuer.server);
    issuerUrl = issuer.issuer;
    if (opts.issuer) writeIssuerPolicy(configDir, issuerUrl);
  }
  const discoveryArgs = [
    'discovery',
    '--configDir', configDir,
    '--grpcAddr', `127.0.0.1:${ports.grpc}`,
    '--secureGRPCAddr', `127.0.0.1:${ports.secureGrpc}`,
    '--httpAddr', `127.0.0.1:${ports.http}`,
    '--monitoringAddr', `127.0.0.1:${ports.monitoring}`,
    '--httpsAddr', `127.0.0.1:${ports.webhook}`,
  ];
  const accessLogFile = opts.accessLog ? join(state, 'access.log') : undefined;
  const jsonAccessLogFile = opts.accessLog ? join(state, 'access.json.log') : undefined;
  if (opts.meshConfig !== undefined || accessLogFile) {
    const meshFile = join(state, 'mesh.yaml');
    const logging = accessLogFile ? `accessLogFile: ${JSON.stringify(accessLogFile)}\nextensionProviders:\n- name: json-file\n  envoyFileAccessLog: { path: ${JSON.stringify(jsonAccessLogFile)}, logFormat: { labels: {} } }\n` : '';
    writeFileSync(meshFile, `${opts.meshConfig ?? ''}\n${logging}`);
    discoveryArgs.push('--meshConfig', meshFile);
  }
  // The CA is kept in the state directory (a restart keeps the root); the issuer vouches for tokens
  // as the orchestrator would; `localhost` is what the agent dials.
  const caDir = join(state, 'ca');
  const discoveryEnv = { AUTHORITY_SELF_SIGNED_CA_DIR: caDir, MESHD_CUSTOM_HOST: 'localhost', ...(opts.secure && issuerUrl ? { TOKEN_ISSUER: issuerUrl } : {}) };
  let discovery = program('pilot-discovery', discoveryArgs, { env: discoveryEnv, ...(sink ? { sink } : {}) });
  const startDiscovery = async () => {
    if (discovery.exitCode === null && discovery.signalCode === null) return;
    discovery = program('pilot-discovery', discoveryArgs, { env: discoveryEnv, ...(sink ? { sink } : {}) });
    await untilReady(`http://127.0.0.1:${ports.http}/ready`, discovery, 'pilot-discovery');
  };
  const agentDir = join(state, 'agent');
  mkdirSync(join(agentDir, 'etc', 'mesh', 'pod'), { recursive: true });
  writeFileSync(join(agentDir, 'etc', 'mesh', 'pod', 'labels'), 'app="httpbin"\nversion="v1"\n');
  const proxyConfig = {
    discoveryAddress: opts.secure ? `localhost:${ports.secureGrpc}` : `127.0.0.1:${ports.grpc}`,
    proxyAdminPort: ports.admin,
    statusPort: ports.status,
    metricsPort: ports.metrics,
    xdsProxyPort: 0,
    interceptionMode: 'NONE',
    configPath: join(agentDir, 'proxy'),
    terminationDrainDuration: '1s',
    ...(opts.proxyConcurrency !== undefined ? { concurrency: opts.proxyConcurrency } : {}),
  };
  let agent: ChildProcess | undefined;
  let gatewayAgent: ChildProcess | undefined;
  let clientAgent: ChildProcess | undefined;
  const refreshers: Array<() => Promise<void>> = [];
  const tokenRefresh = setInterval(() => refreshers.forEach((mint) => void mint().catch((e: unknown) => process.stderr.write(`local mesh: ${(e as Error).message}\n`))), TOKEN_REFRESH_MS).unref();
  const stop = async () => {
    clearInterval(tokenRefresh);
    if (gatewayAgent) await stopChild(gatewayAgent);
    if (clientAgent) await stopChild(clientAgent);
    if (agent) await stopChild(agent);
    await stopChild(discovery);
    await Promise.all(servers.filter((s) => s.listening).map((s) => new Promise((r) => s.close(r))));
  };
  try {
    await untilReady(`http://127.0.0.1:${ports.http}/ready`, discovery, 'pilot-discovery');
    const secureEnv = opts.secure && issuerUrl ? await workloadIdentityEnv(agentDir, issuerUrl, join(caDir, 'root-cert.pem'), refreshers) : {};
    agent = program('pilot-agent', ['proxy'], {
      cwd: agentDir,
      ...(sink ? { sink } : {}),
      env: { POD_NAME: 'httpbin-1', POD_NAMESPACE: 'default', INSTANCE_IP: '127.0.0.1', SERVICE_ACCOUNT: 'httpbin', MESH_META_WORKLOAD_NAME: 'httpbin', PROXY_CONFIG: JSON.stringify({ ...proxyConfig, ...(healthChecked ? { readinessProbe: HTTPBIN_PROBE(ports.app) } : {}) }), ...(healthChecked ? { MESH_META_WORKLOAD_ENTRY: 'httpbin-1' } : {}), ...secureEnv },
    });
    await untilReady(`http://127.0.0.1:${ports.status}/healthz/ready`, agent, 'pilot-agent');
    // The others start once httpbin is among the endpoints: their first requests find it.
    if (healthChecked) await untilReady(`http://127.0.0.1:${ports.http}/debug/workloadentryz`, discovery, 'httpbin (its health check)', 30_000, httpbinEndpoint);
    if (opts.client) {
      const clientDir = join(state, 'sleep');
      const clientEnv = opts.secure && issuerUrl ? await workloadIdentityEnv(clientDir, issuerUrl, join(caDir, 'root-cert.pem'), refreshers, 'sleep:sleep') : {};
      clientAgent = startClientAgent(clientDir, ports, proxyConfig, clientEnv, sink);
      await untilReady(`http://127.0.0.1:${ports.clientStatus}/healthz/ready`, clientAgent, 'pilot-agent (sleep)');
    }
    if (opts.gateway) {
      writeGatewayConfig(configDir, ports.gateway);
      const gatewayDir = join(state, 'gateway');
      const gatewayEnv = opts.secure && issuerUrl ? await workloadIdentityEnv(gatewayDir, issuerUrl, join(caDir, 'root-cert.pem'), refreshers, 'mesh-system:ingressgateway') : {};
      gatewayAgent = startGatewayAgent(gatewayDir, ports, proxyConfig, gatewayEnv, sink);
      await untilReady(`http://127.0.0.1:${ports.gatewayStatus}/healthz/ready`, gatewayAgent, 'pilot-agent proxy router');
    }
  } catch (e) {
    await stop();
    throw new Error(`${(e as Error).message}${sink ? `\n${sink.join('')}` : ''}`);
  }
  return {
    ports,
    configDir,
    ...(issuerUrl && opts.issuer ? { issuerUrl } : {}),
    agent,
    healthChecked,
    ...(gatewayAgent ? { gatewayAgent } : {}),
    ...(clientAgent ? { clientAgent } : {}),
    ...(accessLogFile ? { accessLogFile, jsonAccessLogFile } : {}),
    discovery: () => discovery,
    stopDiscovery: () => stopChild(discovery),
    stopIssuer: () => new Promise<void>((r) => (issuerServer?.listening ? issuerServer.close(() => r()) : r())),
    startDiscovery,
    output: () => sink?.join('') ?? '',
    stop,
  };
}

/** httpbin's readiness probe, run by its agent every second. */
const HTTPBIN_PROBE = (port: number) => ({ httpGet: { host: '127.0.0.1', port, path: '/status/200' }, periodSeconds: 1 });

/** The WorkloadEntry httpbin-1 is an endpoint: its agent's probe passed and pilot-discovery took the report. */
const httpbinEndpoint: Judge = async (res) => {
  const entries = (await res.json()) as Array<{ metadata: { name: string }; endpoint: boolean; status: { conditions: Array<{ status: string; message?: string }> } }>;
  const httpbin = entries.find((e) => e.metadata.name === 'httpbin-1');
  const condition = httpbin?.status.conditions[0];
  return httpbin?.endpoint ? null : `httpbin-1 is not an endpoint yet (${condition ? `Healthy ${condition.status}${condition.message ? `: ${condition.message}` : ''}` : 'no health reported'})`;
};

function instructions(mesh: LocalMesh): string {
  const p = mesh.ports;
  const lines = [
    '',
    'The local mesh is running:',
    `  app (httpbin)          http://127.0.0.1:${p.app}`,
    `  app through its proxy  http://127.0.0.1:${p.inbound}   (inbound: the policies apply here)`,
    mesh.clientAgent
      ? `  the service, outbound  http://127.0.0.1:${p.service}   (the sleep sidecar's outbound listener; send Host: httpbin.default.svc.cluster.local)`
      : `  the service, outbound  http://127.0.0.1:${p.service}   (the proxy's outbound listener; send Host: httpbin.default.svc.cluster.local)`,
    `  discovery debug        http://127.0.0.1:${p.http}/debug   (pilot-discovery request GET /debug)`,
    `  agent readiness        http://127.0.0.1:${p.status}/healthz/ready`,
    ...(mesh.healthChecked ? [`  workload health        http://127.0.0.1:${p.http}/debug/workloadentryz   (httpbin's agent probes /status/200 each second; its entry is an endpoint only while it passes)`] : []),
    `  proxy admin            http://127.0.0.1:${p.admin}/config_dump`,
    '',
    'Try:',
    `  curl -i http://127.0.0.1:${p.inbound}/headers`,
    `  curl -i -H 'Host: httpbin.default.svc.cluster.local' http://127.0.0.1:${p.service}/ip`,
  ];
  if (mesh.clientAgent) {
    lines.push(
      '',
      'Mutual TLS between sidecars (on by default): the sleep workload\'s sidecar (spiffe://cluster.local/ns/sleep/sa/sleep)',
      'calls the service through the app\'s sidecar over mesh mTLS; the app sees the caller in X-Forwarded-Client-Cert:',
      `  curl -s -H 'Host: httpbin.default.svc.cluster.local' http://127.0.0.1:${p.service}/headers`,
      `  (the sleep sidecar's admin: http://127.0.0.1:${p.clientAdmin}/clusters)`,
    );
  }
  if (mesh.gatewayAgent) {
    lines.push(
      '',
      `Ingress gateway: http://127.0.0.1:${p.gateway}   (pilot-agent proxy router; samples/gateway/ingress.yaml routes httpbin.example.com)`,
      `  curl -i -H 'Host: httpbin.example.com' http://127.0.0.1:${p.gateway}/headers`,
      `  (edit ${join(mesh.configDir, 'ingress.yaml')} to change the route; the gateway applies it when saved)`,
    );
  }
  if (mesh.issuerUrl) {
    lines.push(
      `  TOKEN=$(curl -s '${mesh.issuerUrl}/token?sub=alice&groups=admins')`,
      `  curl -i -H "Authorization: Bearer $TOKEN" http://127.0.0.1:${p.inbound}/headers`,
      `  curl -i -H "Authorization: Bearer not-a-jwt" http://127.0.0.1:${p.inbound}/headers     # 401`,
    );
  } else {
    lines.push('  (start with `npm start -- --issuer` for a sample JWT issuer and its RequestAuthentication)');
  }
  lines.push(
    '',
    ...(mesh.accessLogFile
      ? [
          `Access log (every proxy, the Go mesh's format: flags, cluster, upstream host): tail -f ${mesh.accessLogFile}`,
          `  Telemetry: httpbin's inbound lines in JSON to ${mesh.jsonAccessLogFile}: cp samples/telemetry/inbound-json.yaml ${mesh.configDir}/`,
          '',
        ]
      : []),
    'Standard metrics (istio_requests_total and the rest, labelled by both sidecars of each request):',
    `  curl -s http://127.0.0.1:${p.metrics}/stats/prometheus | grep '^istio_requests_total'   (httpbin: reporter="destination")`,
    ...(mesh.clientAgent ? [`  curl -s http://127.0.0.1:${p.clientAdmin}/stats/prometheus | grep '^istio_requests_total'   (sleep: reporter="source")`] : []),
    `  Telemetry: a request_method label, no response_flags: cp samples/telemetry/metrics-tags.yaml ${mesh.configDir}/`,
    '',
    `Policies: copy a file from samples/policies into ${mesh.configDir}; it applies when saved.`,
    `  cp samples/policies/02-allow-alice.yaml ${mesh.configDir}/`,
    'Ctrl-C stops everything.',
    '',
  );
  return lines.join('\n');
}

async function main(argv: string[]): Promise<void> {
  const known = new Set(['--issuer', '--gateway', '--state']);
  const unknown = argv.filter((a, i) => a.startsWith('--') && !known.has(a) && argv[i - 1] !== '--state');
  if (unknown.length) {
    process.stderr.write(`Error: unknown flag ${unknown[0]} (flags: --issuer, --gateway, --state DIR)\n`);
    process.exitCode = 1;
    return;
  }
  const stateIdx = argv.indexOf('--state');
  const stateDir = stateIdx >= 0 ? argv[stateIdx + 1] ?? '.mesh-local' : '.mesh-local';
  const mesh = await startLocalMesh({ stateDir, issuer: argv.includes('--issuer'), gateway: argv.includes('--gateway'), secure: true, client: true, accessLog: true });
  process.stdout.write(instructions(mesh));
  const onSignal = () => void mesh.stop().then(() => process.exit(0));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  for (const agent of [mesh.agent, mesh.clientAgent]) {
    agent?.once('exit', (code) => {
      process.stderr.write(`pilot-agent exited with code ${code}; stopping the mesh\n`);
      void mesh.stop().then(() => process.exit(1));
    });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`Error: ${(e as Error).message}\n`);
    process.exit(1);
  });
}
