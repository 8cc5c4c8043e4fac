// mesh-proxy: the data-plane proxy. Its command line follows Envoy's (the agent starts it the way
// the Go mesh's agent starts Envoy), with a proxy log level and per-component levels.
import { availableParallelism } from 'node:os';
import { configureLogging, LogConfigError, registerScopes, type Level } from '../common/log.js';
import { buildInfo } from '../common/version.js';
import { ListenError } from '../debug/http.js';
import { BootstrapError, loadBootstrap } from '../dataplane/bootstrap.js';
import { PROXY_COMPONENTS, PROXY_LEVELS } from '../dataplane/logging.js';
import { runMeshProxy } from '../dataplane/proxy.js';
import { workerCount } from '../dataplane/workers.js';
import { UsageError, type CommandDef, type RunContext } from './command.js';
import type { FlagDef } from './flags.js';

export { PROXY_COMPONENTS };

const FLAGS: readonly FlagDef[] = [
  { name: 'config-path', short: 'c', type: 'string', default: '', usage: 'Path to the bootstrap configuration file (JSON or YAML)', effective: true },
  { name: 'config-yaml', type: 'string', default: '', usage: 'Bootstrap configuration as YAML, merged over --config-path', effective: true },
  { name: 'log-level', short: 'l', type: 'string', default: 'info', usage: `Log level (one of ${Object.keys(PROXY_LEVELS).join(', ')})`, effective: true },
  { name: 'component-log-level', type: 'string', default: '', usage: 'Comma-separated component:level pairs, e.g. jwt:debug,rbac:debug', effective: true },
  { name: 'concurrency', type: 'int', default: '0', usage: 'Number of workers (this process and worker processes sharing its listeners); 0 uses one per core', effective: true },
  { name: 'service-cluster', type: 'string', default: '', usage: 'Local service cluster name, overrides the bootstrap node.cluster', effective: true },
  { name: 'service-node', type: 'string', default: '', usage: 'Local service node name, overrides the bootstrap node.id', effective: true },
  { name: 'drain-time-s', type: 'int', default: '600', usage: 'Seconds listeners drain before they close', effective: true },
  { name: 'version', type: 'bool', default: 'false', usage: 'Print the version and exit', effective: true },
];

function proxyLevel(raw: string, flag: string): Level {
  const level = PROXY_LEVELS[raw];
  if (!level) throw new UsageError(`invalid argument "${raw}" for "${flag}" flag: expected one of ${Object.keys(PROXY_LEVELS).join(', ')}`);
  return level;
}

/** Applies --log-level and --component-log-level to the proxy's log scopes. */
function configureProxyLogging(ctx: RunContext): void {
  registerScopes(PROXY_COMPONENTS);
  const base = proxyLevel(ctx.flags.string('log-level'), '-l, --log-level');
  const pairs = ctx.flags.string('component-log-level').split(',').filter(Boolean).map((p) => {
    const [component, level] = p.split(':');
    return `${component}:${proxyLevel(level ?? '', '--component-log-level')}`;
  });
  try {
    configureLogging({ asJson: false, caller: [], outputLevel: [`default:${base}`, ...pairs].join(','), stacktraceLevel: 'default:none', targets: ['stderr'] });
  } catch (e) {
    if (e instanceof LogConfigError) throw new UsageError(e.message.replace('--log_output_level', '--component-log-level'));
    throw e;
  }
}

async function runProxy(ctx: RunContext): Promise<number> {
  if (ctx.flags.bool('version')) {
    process.stdout.write(`mesh-proxy version: ${buildInfo.revision}/${buildInfo.version}/${buildInfo.status}/Node.js ${buildInfo.nodeVersion}\n`);
    return 0;
  }
  configureProxyLogging(ctx);
  if (ctx.flags.number('concurrency') < 0) throw new UsageError(`invalid argument "${ctx.flags.number('concurrency')}" for "--concurrency" flag: expected a non-negative integer`);
  if (ctx.flags.number('drain-time-s') < 0) throw new UsageError(`invalid argument "${ctx.flags.number('drain-time-s')}" for "--drain-time-s" flag: expected a non-negative integer`);
  let code: number;
  try {
    const bootstrap = loadBootstrap({
      path: ctx.flags.string('config-path'),
      yaml: ctx.flags.string('config-yaml'),
      serviceCluster: ctx.flags.string('service-cluster'),
      serviceNode: ctx.flags.string('service-node'),
    });
    const workerProcesses = workerCount(ctx.flags.number('concurrency'), availableParallelism());
    code = await runMeshProxy({ bootstrap, drainTimeMs: ctx.flags.number('drain-time-s') * 1000, workerProcesses });
  } catch (e) {
    if (e instanceof BootstrapError || e instanceof ListenError) throw new UsageError(e.message);
    throw e;
  }
  // Whatever a closed connection or timer might still hold, a stopped proxy exits.
  setTimeout(() => process.exit(code), 1000).unref();
  return code;
}

export const meshProxy: CommandDef = {
  name: 'mesh-proxy',
  short: 'Mesh data-plane proxy',
  long: 'mesh-proxy is the data-plane proxy of the mesh, configured over Envoy v3 xDS.',
  flags: FLAGS,
  run: runProxy,
};
