// pilot-discovery: the control plane. Flag tables follow the spec (commands.md) name for name,
// default for default; `effective: false` marks flags whose component has not landed yet.
import { readFileSync } from 'node:fs';
import { toMillis } from '../common/duration.js';
import { setting } from '../common/env.js';
import { scope } from '../common/log.js';
import { proxyViews } from '../debug/ctrlz/proxies.js';
import { ListenError } from '../debug/http.js';
import { UsageError, type CommandDef, type RunContext } from './command.js';
import { startCtrlz } from './ctrlz.js';
import { DiscoveryServer } from './discovery-server.js';
import { DEFAULT_MESH_CONFIG, MeshConfigError, parseMeshConfig, type MeshConfig } from '../model/mesh-config.js';
import { parsePlugins, pluginNotices, PluginsError, type SecurityPlugin } from '../security/plugins.js';
import { BundleLoadError } from '../security/federation/bundle-fetcher.js';
import { parseBundleEndpoints, type BundleEndpoint } from '../security/federation/bundle-format.js';
import type { FlagDef } from './flags.js';
import { announceIneffective, ineffectiveFooter, LOG_FLAGS, requestCommand, startRuntime, versionCommand } from './runtime.js';

export const DISCOVERY_SCOPES = [
  'ads', 'adsc', 'all', 'analysis', 'authn', 'authorization', 'ca', 'cache', 'default', 'orchlog', 'orch', 'mcp', 'model',
  'pkica', 'processing', 'resource', 'rootcertrotator', 'secretcontroller', 'serverca', 'source', 'spiffe', 'status',
  'validation', 'validationController', 'validationServer', 'wle',
] as const;

/** The monitoring address `request` talks to: the discovery server on this host. */
export const LOCAL_MONITORING_URL = 'http://127.0.0.1:15014';

const COMMON_FLAGS: readonly FlagDef[] = [
  { name: 'ctrlz_address', type: 'string', default: 'localhost', usage: "The IP Address to listen on for the ControlZ introspection facility. Use '*' to indicate all addresses.", effective: true },
  { name: 'ctrlz_port', type: 'uint16', default: '9876', usage: 'The IP port to use for the ControlZ introspection facility', effective: true },
  { name: 'keepaliveInterval', type: 'duration', default: '30s', usage: 'The time interval if no activity on the connection it pings the peer to see if the transport is alive', effective: true },
  { name: 'keepaliveMaxServerConnectionAge', type: 'duration', default: '2562047h47m16.854775807s', usage: 'Maximum duration a connection will be kept open on the server side before a graceful close', effective: true },
  { name: 'keepaliveTimeout', type: 'duration', default: '10s', usage: 'After having pinged for keepalive check, the client waits for a duration of keepaliveTimeout and if no activity is seen even after that the connection is closed', effective: true },
  ...LOG_FLAGS,
];

const DISCOVERY_FLAGS: readonly FlagDef[] = [
  { name: 'appNamespace', short: 'a', type: 'string', default: '', usage: 'Comma-separated namespaces the controller manages; empty manages all namespaces', effective: true },
  { name: 'caCertFile', type: 'string', default: '', usage: 'File containing the x509 Server CA Certificate', effective: false },
  { name: 'clusterID', type: 'string', default: 'Orchestrator', usage: 'The ID of the cluster that this instance resides', effective: true },
  { name: 'clusterRegistriesNamespace', type: 'string', default: 'mesh-system', usage: 'Namespace for ConfigMap which stores clusters configs', effective: false },
  { name: 'configDir', type: 'string', default: '', usage: 'Directory to watch for updates to config yaml files. If specified, the files will be used as the source of config, rather than an orchestrator resource client.', effective: true },
  { name: 'domain', type: 'string', default: 'cluster.local', usage: 'DNS domain suffix', effective: true },
  { name: 'grpcAddr', type: 'string', default: ':15010', usage: 'Discovery service gRPC address', effective: true },
  { name: 'httpAddr', type: 'string', default: ':8080', usage: 'Discovery service HTTP address', effective: true },
  { name: 'httpsAddr', type: 'string', default: ':15017', usage: 'Injection and validation service HTTPS address', effective: true },
  { name: 'orchconfig', type: 'string', default: '', usage: 'Use an orchestrator configuration file instead of in-cluster configuration', effective: true },
  { name: 'orchestratorApiBurst', type: 'int', default: '160', usage: 'Maximum burst for throttle when communicating with the orchestrator API', effective: true },
  { name: 'orchestratorApiQPS', type: 'float32', default: '80', usage: 'Maximum QPS when communicating with the orchestrator API', effective: true },
  { name: 'meshConfig', type: 'string', default: './etc/mesh/config/mesh', usage: 'File name for mesh configuration. If not specified, a default mesh will be used.', effective: true },
  { name: 'monitoringAddr', type: 'string', default: ':15014', usage: 'HTTP address to use for the self-monitoring information', effective: true },
  { name: 'namespace', short: 'n', type: 'string', default: 'mesh-system', env: 'POD_NAMESPACE', usage: 'Select a namespace where the controller resides', effective: true },
  { name: 'networksConfig', type: 'string', default: '/etc/mesh/config/meshNetworks', usage: 'File name for mesh networks configuration. If not specified, a default mesh networks will be used.', effective: false },
  { name: 'plugins', type: 'stringSlice', default: 'ext_authz,authn,authz', usage: 'comma-separated list of networking plugins to enable', effective: true },
  { name: 'profile', type: 'bool', default: 'false', usage: 'Enable profiling via web interface host:port/debug/pprof', effective: true },
  { name: 'registries', type: 'stringSlice', default: 'Orchestrator', usage: 'Comma separated list of platform service registries to read from (choose one or more from {Orchestrator, Mock})', effective: true },
  { name: 'resync', type: 'duration', default: '1m0s', usage: 'Controller resync interval', effective: true },
  { name: 'secureGRPCAddr', type: 'string', default: ':15012', usage: 'Discovery service secured gRPC address', effective: true },
  { name: 'tlsCertFile', type: 'string', default: '', usage: 'File containing the x509 Certificate for HTTPS.', effective: true },
  { name: 'tlsKeyFile', type: 'string', default: '', usage: 'File containing the x509 private key matching --tlsCertFile', effective: true },
];

const REGISTRIES = ['Orchestrator', 'Mock'];

function checkFlags(ctx: RunContext): void {
  for (const r of ctx.flags.list('registries')) {
    if (!REGISTRIES.includes(r)) throw new UsageError(`invalid argument "${r}" for "--registries" flag: expected one of ${REGISTRIES.join(', ')}`);
  }
  if (ctx.flags.duration('resync') <= 0n) throw new UsageError('invalid argument for "--resync" flag: expected a positive duration');
}

/**
 * The mesh config file: a missing file is the default mesh (as the production mesh); an invalid one
 * stops the program with an error naming the field. Fields without effect yet are announced.
 */
function readMeshConfig(file: string, log: ReturnType<typeof scope>): MeshConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new UsageError(`cannot read mesh config ${file}: ${(e as Error).message}`);
    log.info(`mesh config ${file} not found; using the default mesh config`);
    return DEFAULT_MESH_CONFIG;
  }
  try {
    const mesh = parseMeshConfig(text, file);
    if (mesh.notEffective.length) log.warn(`mesh config ${file}: accepted, not yet effective: ${mesh.notEffective.join(', ')}`);
    return mesh;
  } catch (e) {
    if (e instanceof MeshConfigError) throw new UsageError(e.message);
    throw e;
  }
}

/** `--plugins`: an unknown name stops the program; plugins left out are announced. */
function readPlugins(list: readonly string[], log: ReturnType<typeof scope>): ReadonlySet<SecurityPlugin> {
  let plugins: ReadonlySet<SecurityPlugin>;
  try {
    plugins = parsePlugins(list);
  } catch (e) {
    if (e instanceof PluginsError) throw new UsageError(e.message);
    throw e;
  }
  for (const note of pluginNotices(plugins)) log.warn(note);
  return plugins;
}

/** SPIFFE_BUNDLE_ENDPOINTS; a bad tuple stops the command with the error naming it. */
function readBundleEndpoints(): BundleEndpoint[] {
  try {
    return parseBundleEndpoints(setting('SPIFFE_BUNDLE_ENDPOINTS'));
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/** How long in-flight work may take to finish after a signal before the process gives up. */
const SHUTDOWN_LIMIT_MS = 10_000;

/** Runs until SIGTERM or SIGINT, then shuts down gracefully. */
async function runDiscovery(ctx: RunContext): Promise<number> {
  startRuntime('discovery', DISCOVERY_SCOPES, ctx);
  checkFlags(ctx);
  const log = scope('default');
  announceIneffective('discovery', ctx);
  const f = ctx.flags;
  const mesh = readMeshConfig(f.string('meshConfig'), log);
  const plugins = readPlugins(f.list('plugins'), log);
  const server = new DiscoveryServer({
    httpAddr: f.string('httpAddr'),
    monitoringAddr: f.string('monitoringAddr'),
    grpcAddr: f.string('grpcAddr'),
    secureGrpcAddr: f.string('secureGRPCAddr'),
    bundleEndpoints: readBundleEndpoints(),
    namespace: f.string('namespace'),
    httpsAddr: f.string('httpsAddr'),
    ...(f.string('configDir') ? { configDir: f.string('configDir') } : {}),
    orchestrator: {
      ...(f.string('orchconfig') ? { kubeconfig: f.string('orchconfig') } : {}),
      namespaces: f.string('appNamespace').split(',').map((n) => n.trim()).filter(Boolean),
      resyncMs: toMillis(f.duration('resync')),
      qps: f.number('orchestratorApiQPS'),
      burst: f.number('orchestratorApiBurst'),
      rootNamespace: mesh.rootNamespace,
    },
    registries: f.list('registries'),
    domain: f.string('domain'),
    clusterId: f.string('clusterID'),
    keepaliveIntervalMs: toMillis(f.duration('keepaliveInterval')),
    keepaliveTimeoutMs: toMillis(f.duration('keepaliveTimeout')),
    maxConnectionAgeMs: toMillis(f.duration('keepaliveMaxServerConnectionAge')),
    ...(f.string('tlsCertFile') ? { tlsCertFile: f.string('tlsCertFile') } : {}),
    ...(f.string('tlsKeyFile') ? { tlsKeyFile: f.string('tlsKeyFile') } : {}),
    profile: f.bool('profile'),
    pathNormalization: mesh.pathNormalization,
    localityLbSetting: mesh.localityLbSetting,
    h2Upgrade: mesh.h2Upgrade,
    ...(mesh.tcpKeepalive ? { tcpKeepalive: mesh.tcpKeepalive } : {}),
    ...(mesh.accessLog ? { accessLog: mesh.accessLog } : {}),
    telemetryProviders: mesh.telemetryProviders,
    meshTraffic: mesh.traffic,
    rootNamespace: mesh.rootNamespace,
    extensionProviders: mesh.extensionProviders,
    plugins,
    meshMtls: { autoMtls: mesh.enableAutoMtls, ...(mesh.trustDomain ? { trustDomain: mesh.trustDomain } : {}), trustDomainAliases: mesh.trustDomainAliases },
    ingress: mesh.ingress,
  });
  // Handlers first: a signal that arrives while starting, or right after "ready" is logged (the
  // CA and the secured port may still be being made), is a graceful shutdown, never death by signal.
  const signalled = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  const ctrlz = await startCtrlz('discovery', 'pilot-discovery', ctx, () => proxyViews(server.xds.connections()));
  try {
    await Promise.race([server.start(), signalled]);
  } catch (e) {
    await Promise.all([server.stop(), ctrlz.close()]);
    if (e instanceof ListenError || e instanceof BundleLoadError) throw new UsageError(e.message);
    throw e;
  }
  const signal = await signalled;
  log.info(`received ${signal}, shutting down`);
  const drain = setTimeout(() => {
    log.warn('graceful shutdown took too long; exiting');
    process.exit(1);
  }, SHUTDOWN_LIMIT_MS);
  await Promise.all([server.stop(), ctrlz.close()]);
  clearTimeout(drain);
  log.info('shutdown complete');
  // A signal during start stops the server while start() may still be binding or reading: whatever
  // it leaves open must not keep the process alive (the Go mesh's process ends when main returns).
  setTimeout(() => process.exit(0), 1000).unref();
  return 0;
}

export const pilotDiscovery: CommandDef = {
  name: 'pilot-discovery',
  short: 'Mesh control plane',
  long: 'Mesh Pilot provides fleet-wide traffic management capabilities in the mesh.',
  persistentFlags: COMMON_FLAGS,
  footer: ineffectiveFooter('discovery'),
  subcommands: [
    { name: 'discovery', short: 'Start Mesh proxy discovery service.', flags: DISCOVERY_FLAGS, footer: ineffectiveFooter('discovery'), run: runDiscovery },
    requestCommand('discovery', DISCOVERY_SCOPES, 'Makes an HTTP request to Pilot metrics/debug endpoint', () => LOCAL_MONITORING_URL),
    versionCommand('discovery', DISCOVERY_SCOPES),
  ],
};
