// pilot-agent: runs beside the proxy. Flag tables follow the spec (commands.md) name for name,
// default for default; `effective: false` marks flags whose component has not landed yet.
import { runProxyAgent } from '../agent/agent.js';
import { PROXY_TYPES, type ProxyType } from '../agent/node.js';
import { TOKEN_MANAGER_PLUGINS, type TokenManagerPlugin } from '../agent/sts/token-exchange.js';
import { UsageError, type CommandDef, type RunContext } from './command.js';
import { startCtrlz } from './ctrlz.js';
import type { FlagDef } from './flags.js';
import { announceIneffective, ineffectiveFooter, LOG_FLAGS, requestCommand, startRuntime, versionCommand } from './runtime.js';
import { meshCleanIptables, meshIptables } from './mesh-iptables.js';
import { waitForReady } from './wait.js';

export const AGENT_SCOPES = [
  'ads', 'adsc', 'all', 'authn', 'authorization', 'ca', 'cache', 'authorityclient', 'default', 'dns', 'cloudcred', 'cloudca',
  'healthcheck', 'orchlog', 'orch', 'mockcred', 'model', 'sds', 'spiffe', 'stsclient', 'stsserver', 'token', 'validation',
  'validationController', 'wasm', 'wle', 'xdsproxy',
] as const;

/** The proxy admin API `request` talks to. */
export const PROXY_ADMIN_URL = 'http://localhost:15000';

/** Flags mesh-iptables and mesh-clean-iptables share, with the same meaning. */
const OWNER_FLAGS: readonly FlagDef[] = [
  { name: 'dry-run', short: 'n', type: 'bool', default: 'false', usage: 'Do not call any external dependencies like iptables', effective: true },
  { name: 'proxy-gid', short: 'g', type: 'string', default: '', usage: 'Specify the GID of the user for which the redirection is not applied (same default value as -u param)', effective: true },
  { name: 'proxy-uid', short: 'u', type: 'string', default: '', usage: 'Specify the UID of the user for which the redirection is not applied. Typically, this is the UID of the proxy container; empty is the UID of $PROXY_USER, else 1337', effective: true },
];

// Clean finds the DNS rules in the live state, so --redirect-dns only keeps the Go mesh's command line working.
export const CLEAN_IPTABLES_FLAGS: readonly FlagDef[] = [
  ...OWNER_FLAGS,
  { name: 'redirect-dns', type: 'bool', default: 'false', usage: 'Enable capture of dns traffic by mesh-agent (DNS capture rules are removed whenever present, with or without this flag)', effective: true },
];

export const IPTABLES_FLAGS: readonly FlagDef[] = [
  ...OWNER_FLAGS,
  { name: 'redirect-dns', type: 'bool', default: 'false', env: 'MESH_META_DNS_CAPTURE', usage: 'Enable capture of dns traffic by mesh-agent: TCP and UDP port 53 to the name servers of /etc/resolv.conf go to the agent on 127.0.0.1:15053', effective: true },
  { name: 'dataplane-port', short: 'p', type: 'string', default: '15001', env: 'DATAPLANE_PORT', usage: 'Specify the proxy port to which redirect all TCP outbound traffic', effective: true },
  { name: 'inbound-capture-port', short: 'z', type: 'string', default: '15006', env: 'INBOUND_CAPTURE_PORT', usage: 'Port to which all inbound TCP traffic to the pod/VM should be redirected to', effective: true },
  { name: 'inbound-tunnel-port', short: 'e', type: 'string', default: '15008', env: 'INBOUND_TUNNEL_PORT', usage: 'Specify the mesh tunnel port for inbound tcp traffic', effective: true },
  { name: 'iptables-probe-port', type: 'string', default: '15002', usage: 'Set listen port for failure detection', effective: true },
  { name: 'probe-timeout', type: 'duration', default: '5s', usage: 'Failure detection timeout', effective: true },
  { name: 'mesh-inbound-interception-mode', short: 'm', type: 'string', default: '', usage: 'The mode used to redirect inbound connections to the proxy, either "REDIRECT" (when empty) or "TPROXY"', effective: true },
  { name: 'mesh-inbound-ports', short: 'b', type: 'string', default: '', usage: "Comma separated list of inbound ports for which traffic is to be redirected, the wildcard character '*' can be used to configure redirection for all ports. An empty list will disable", effective: true },
  { name: 'mesh-inbound-tproxy-mark', short: 't', type: 'string', default: '', usage: 'TPROXY mark for inbound connections; empty is 1337', effective: true },
  { name: 'mesh-inbound-tproxy-route-table', short: 'r', type: 'string', default: '', usage: 'TPROXY route table for inbound connections; empty is 133', effective: true },
  { name: 'mesh-local-exclude-ports', short: 'd', type: 'string', default: '', env: 'MESH_LOCAL_EXCLUDE_PORTS', usage: 'Comma separated list of inbound ports to be excluded from redirection to the proxy. Only applies when all inbound traffic (i.e. "*") is being redirected', effective: true },
  { name: 'mesh-local-outbound-ports-exclude', short: 'o', type: 'string', default: '', usage: 'Comma separated list of outbound ports to be excluded from redirection to the proxy', effective: true },
  { name: 'mesh-outbound-ports', short: 'q', type: 'string', default: '', usage: 'Comma separated list of outbound ports to be explicitly included for redirection to the proxy', effective: true },
  { name: 'mesh-service-cidr', short: 'i', type: 'string', default: '', usage: "Comma separated list of IP ranges in CIDR form to redirect to the proxy (optional). The wildcard character '*' can be used to redirect all outbound traffic. An empty list will disable all outbound", effective: true },
  { name: 'mesh-service-exclude-cidr', short: 'x', type: 'string', default: '', env: 'MESH_SERVICE_EXCLUDE_CIDR', usage: 'Comma separated list of IP ranges in CIDR form to be excluded from redirection. Only applies when all outbound traffic (i.e. "*") is being redirected', effective: true },
  { name: 'orch-virt-interfaces', short: 'k', type: 'string', default: '', usage: 'Comma separated list of virtual interfaces whose inbound traffic (from VM) will be treated as outbound', effective: true },
  { name: 'restore-format', short: 'f', type: 'bool', default: 'false', usage: 'Print iptables rules in iptables-restore interpretable format', effective: true },
  { name: 'run-validation', type: 'bool', default: 'false', usage: 'Validate iptables', effective: true },
  { name: 'skip-rule-apply', type: 'bool', default: 'false', usage: 'Skip iptables apply', effective: true },
];

const PROXY_LOG_LEVELS = ['trace', 'debug', 'info', 'warning', 'error', 'critical', 'off'];

const PROXY_FLAGS: readonly FlagDef[] = [
  { name: 'concurrency', type: 'int', default: '0', usage: 'number of worker threads to run', effective: true },
  // Not in the spec's agent table; the introspection facility serves the agent like the discovery server (docs/operations.md).
  { name: 'ctrlz_address', type: 'string', default: 'localhost', usage: "The IP Address to listen on for the ControlZ introspection facility. Use '*' to indicate all addresses.", effective: true },
  { name: 'ctrlz_port', type: 'uint16', default: '9876', usage: 'The IP port to use for the ControlZ introspection facility', effective: true },
  { name: 'domain', type: 'string', default: '', usage: 'DNS domain suffix. If not provided uses ${POD_NAMESPACE}.svc.cluster.local', effective: true },
  { name: 'meshConfig', type: 'string', default: './etc/mesh/config/mesh', usage: 'File name for mesh configuration. If not specified, a default mesh will be used. This may be overridden by PROXY_CONFIG environment variable or proxy.mesh.io/config annotation.', effective: true },
  { name: 'outlierLogPath', type: 'string', default: '', usage: 'The log path for outlier detection', effective: true },
  { name: 'proxyComponentLogLevel', type: 'string', default: 'misc:error', usage: 'The component log level used to start the proxy', effective: true },
  { name: 'proxyLogLevel', type: 'string', default: 'warning', usage: `The log level used to start the proxy (choose one of {${PROXY_LOG_LEVELS.join(', ')}})`, effective: true },
  { name: 'serviceCluster', type: 'string', default: 'mesh-proxy', usage: 'Service cluster', effective: true },
  { name: 'stsPort', type: 'int', default: '0', usage: 'HTTP Port on which to serve Security Token Service (STS). If zero, STS service will not be provided. Needs MESH_STS_TOKEN_ENDPOINT (docs/agent.md).', effective: true },
  { name: 'templateFile', type: 'string', default: '', usage: 'Go template bootstrap config', effective: true },
  { name: 'tokenManagerPlugin', type: 'string', default: 'CloudTokenExchange', usage: `Token provider specific plugin name (one of ${TOKEN_MANAGER_PLUGINS.join(', ')}).`, effective: true },
];

const WAIT_FLAGS: readonly FlagDef[] = [
  { name: 'periodMillis', type: 'int', default: '500', usage: 'number of milliseconds to wait between attempts', effective: true },
  { name: 'requestTimeoutMillis', type: 'int', default: '500', usage: 'number of milliseconds to wait for response', effective: true },
  { name: 'timeoutSeconds', type: 'int', default: '60', usage: 'maximum number of seconds to wait for proxy to be ready', effective: true },
  { name: 'url', type: 'string', default: 'http://localhost:15021/healthz/ready', usage: 'URL to use in requests', effective: true },
];

/** A one-shot command: settings and logging, then the work (no startup notice, its output is data). */
function oneShot(run: (ctx: RunContext) => Promise<number>) {
  return (ctx: RunContext): Promise<number> => {
    startRuntime('agent', AGENT_SCOPES, ctx);
    return run(ctx);
  };
}

function checkProxyFlags(ctx: RunContext): void {
  const level = ctx.flags.string('proxyLogLevel');
  if (!PROXY_LOG_LEVELS.includes(level)) throw new UsageError(`invalid argument "${level}" for "--proxyLogLevel" flag: expected one of ${PROXY_LOG_LEVELS.join(', ')}`);
  const plugin = ctx.flags.string('tokenManagerPlugin');
  if (!(TOKEN_MANAGER_PLUGINS as readonly string[]).includes(plugin)) throw new UsageError(`invalid argument "${plugin}" for "--tokenManagerPlugin" flag: expected one of ${TOKEN_MANAGER_PLUGINS.join(', ')}`);
  for (const n of ['concurrency', 'stsPort']) if (ctx.flags.number(n) < 0) throw new UsageError(`invalid argument "${ctx.flags.number(n)}" for "--${n}" flag: expected a non-negative integer`);
}

/** `proxy [sidecar|router]`: the Go mesh's proxy type argument; none is a sidecar. */
function proxyTypeOf(ctx: RunContext): ProxyType {
  const [type = 'sidecar', ...rest] = ctx.args;
  if (rest.length > 0) throw new UsageError(`accepts at most 1 arg(s), received ${ctx.args.length}`);
  if (!(PROXY_TYPES as readonly string[]).includes(type)) throw new UsageError(`invalid proxy type "${type}": expected one of ${PROXY_TYPES.join(', ')}`);
  return type as ProxyType;
}

async function runProxy(ctx: RunContext): Promise<number> {
  startRuntime('agent', AGENT_SCOPES, ctx);
  checkProxyFlags(ctx);
  const proxyType = proxyTypeOf(ctx);
  announceIneffective('agent', ctx);
  const f = ctx.flags;
  const ctrlz = await startCtrlz('agent', 'pilot-agent', ctx);
  try {
    return await runProxyAgent({
      proxyType,
      meshConfig: f.string('meshConfig'),
      concurrency: f.number('concurrency'),
      domain: f.string('domain'),
      outlierLogPath: f.string('outlierLogPath'),
      proxyLogLevel: f.string('proxyLogLevel'),
      proxyComponentLogLevel: f.string('proxyComponentLogLevel'),
      templateFile: f.string('templateFile'),
      stsPort: f.number('stsPort'),
      tokenManagerPlugin: f.string('tokenManagerPlugin') as TokenManagerPlugin,
      // Only an explicit flag overrides ProxyConfig's serviceCluster; the flag's default must not.
      ...(f.explicit.has('serviceCluster') ? { serviceCluster: f.string('serviceCluster') } : {}),
    });
  } finally {
    await ctrlz.close();
  }
}

async function runWait(ctx: RunContext): Promise<number> {
  startRuntime('agent', AGENT_SCOPES, ctx);
  const f = ctx.flags;
  for (const n of ['periodMillis', 'requestTimeoutMillis', 'timeoutSeconds']) {
    if (f.number(n) <= 0) throw new UsageError(`invalid argument "${f.number(n)}" for "--${n}" flag: expected a positive integer`);
  }
  return waitForReady({ url: f.string('url'), periodMs: f.number('periodMillis'), requestTimeoutMs: f.number('requestTimeoutMillis'), timeoutMs: f.number('timeoutSeconds') * 1000 });
}

export const pilotAgent: CommandDef = {
  name: 'pilot-agent',
  short: 'Mesh agent',
  long: 'Mesh agent runs in the sidecar or gateway container and bootstraps the proxy.',
  persistentFlags: LOG_FLAGS,
  footer: ineffectiveFooter('agent'),
  subcommands: [
    { name: 'mesh-clean-iptables', short: 'Clean up iptables rules for the mesh sidecar', flags: CLEAN_IPTABLES_FLAGS, run: oneShot(meshCleanIptables) },
    { name: 'mesh-iptables', short: 'Set up iptables rules for the mesh sidecar', flags: IPTABLES_FLAGS, run: oneShot(meshIptables) },
    { name: 'proxy', short: 'XDS proxy agent', args: '[sidecar|router]', flags: PROXY_FLAGS, footer: ineffectiveFooter('agent'), run: runProxy },
    requestCommand('agent', AGENT_SCOPES, 'Makes an HTTP request to the proxy admin API', () => PROXY_ADMIN_URL),
    versionCommand('agent', AGENT_SCOPES),
    { name: 'wait', short: 'Waits until the proxy is ready', flags: WAIT_FLAGS, run: runWait },
  ],
};
