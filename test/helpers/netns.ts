// Pods as network namespaces, for tests of traffic capture: a namespace of the test's own, a veth
// pair to the test's namespace (the "node"), and iptables rules applied inside the pod only.
import { execFileSync, spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { discoveryArgs, eventually, REPO_ROOT, Running, start, wrapped } from './proc.js';

/** Why pods cannot be made here (not root, a tool missing), or undefined when they can. */
export function podsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root for ip netns and iptables';
  for (const tool of ['ip', 'iptables', 'setpriv']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `needs ${tool} (Debian: iproute2, iptables, util-linux)`;
    }
  }
  // Root without the capabilities (an unprivileged container) cannot make namespaces or NAT rules.
  const why = tryInNamespace('mesh-probe', ['iptables', '-t', 'nat', '-L', '-n']);
  return why && `cannot make a network namespace with NAT here: ${why}`;
}

/** Makes a throwaway namespace and runs `argv` in it: why that failed, or undefined. */
function tryInNamespace(tag: string, argv: string[]): string | undefined {
  const probe = `${tag}-${process.pid}`;
  try {
    execFileSync('ip', ['netns', 'add', probe], { stdio: ['ignore', 'ignore', 'pipe'] });
    execFileSync('ip', ['netns', 'exec', probe, ...argv], { stdio: ['ignore', 'ignore', 'pipe'] });
    return undefined;
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    return String(err.stderr ?? '').trim() || err.message;
  } finally {
    try {
      execFileSync('ip', ['netns', 'del', probe], { stdio: 'ignore' });
    } catch {
      // never made
    }
  }
}

/** Why TPROXY capture cannot be tried here (no xt_TPROXY in the kernel), or undefined when it can. */
export function tproxyUnavailable(): string | undefined {
  const why = tryInNamespace('mesh-tproxy-probe', ['iptables', '-t', 'mangle', '-A', 'PREROUTING', '-p', 'tcp', '-j', 'TPROXY', '--on-port', '1', '--tproxy-mark', '1']);
  return why && `cannot add a TPROXY rule here: ${why}`;
}

/** Why legacy iptables cannot be used here (no iptables-legacy, no x_tables), or undefined when it can. */
export function legacyUnavailable(): string | undefined {
  const why = tryInNamespace('mesh-legacy-probe', ['iptables-legacy', '-t', 'filter', '-L', '-n']);
  return why && `cannot use iptables-legacy here: ${why}`;
}

/** Whether `uid` can run the built programs from this checkout (the sidecar runs as 1337). */
export function readableBy(uid: number): boolean {
  try {
    accessSync(REPO_ROOT, constants.R_OK);
    execFileSync('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', process.execPath, '-e', `require(${JSON.stringify(`${REPO_ROOT}/package.json`)})`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export class Pod {
  /** The pod's address on its veth (what other hosts reach it at). */
  readonly ip: string;
  /** The test namespace's end of the veth. */
  readonly hostIp: string;
  /** The pod's interface name. */
  readonly podIf: string;

  private constructor(
    readonly ns: string,
    /** The test namespace's end of the veth (more host addresses can be added to it). */
    readonly hostIf: string,
    subnet: number,
  ) {
    this.ip = `10.213.${subnet}.2`;
    this.hostIp = `10.213.${subnet}.1`;
    this.podIf = `${hostIf}p`;
  }

  /** Makes a namespace with loopback up and a /24 veth link to the test's namespace. */
  static create(tag: string, subnet: number): Pod {
    const pod = new Pod(`${tag}-${process.pid}`, `v${subnet}-${process.pid}`.slice(0, 13), subnet);
    const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    ip('netns', 'add', pod.ns);
    try {
      ip('link', 'add', pod.hostIf, 'type', 'veth', 'peer', 'name', pod.podIf);
      ip('link', 'set', pod.podIf, 'netns', pod.ns);
      ip('addr', 'add', `${pod.hostIp}/24`, 'dev', pod.hostIf);
      ip('link', 'set', pod.hostIf, 'up');
      pod.exec('ip', 'link', 'set', 'lo', 'up');
      pod.exec('ip', 'addr', 'add', `${pod.ip}/24`, 'dev', pod.podIf);
      pod.exec('ip', 'link', 'set', pod.podIf, 'up');
      pod.exec('ip', 'route', 'add', 'default', 'via', pod.hostIp);
    } catch (e) {
      pod.destroy();
      throw e;
    }
    return pod;
  }

  /** Runs a short command inside the pod; throws with its stderr when it fails. */
  exec(cmd: string, ...args: string[]): string {
    try {
      return execFileSync('ip', ['netns', 'exec', this.ns, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new Error(`in ${this.ns}: ${cmd} ${args.join(' ')}: ${err.stderr || err.message}`);
    }
  }

  /** The command line running `argv` inside the pod (as `uid` when given). */
  command(argv: string[], uid?: number): string[] {
    return wrapped(argv, { netns: this.ns, ...(uid === undefined ? {} : { uid }) });
  }

  /**
   * Runs a Node script as an application of the pod (not the proxy's user, so its traffic is
   * captured); resolves to its exit code and output.
   */
  runNode(script: string): Promise<{ code: number | null; out: string; err: string }> {
    const [cmd, ...args] = this.command([process.execPath, '-e', script]);
    const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    return new Promise((resolve) => child.on('close', (code) => resolve({ code, out, err })));
  }

  /** Removes the namespace; its veth end, and so the pair, goes with it. */
  destroy(): void {
    try {
      execFileSync('ip', ['netns', 'del', this.ns], { stdio: 'ignore' });
    } catch {
      // already gone
    }
  }
}

/** The sidecar's user: its traffic is exempt from capture. */
export const PROXY_UID = 1337;

/**
 * The discovery server (on 127.0.0.1:15010 in the pod) and `pilot-agent proxy` as PROXY_UID, with
 * `agentDir` (owned by that user) as its working directory; resolves once the agent is ready.
 * Both are pushed to `procs`, so the caller stops them even when startup fails half-way.
 */
export async function startSidecarInPod(pod: Pod, configDir: string, agentDir: string, env: Record<string, string>, procs: Running[]): Promise<{ discovery: Running; agent: Running }> {
  const discovery = new Running(start('pilot-discovery', discoveryArgs(configDir, { grpcAddr: '127.0.0.1:15010' }), { netns: pod.ns }));
  procs.push(discovery);
  await discovery.waitFor(/gRPC xDS server listening/);
  const proxyConfig = { discoveryAddress: '127.0.0.1:15010', xdsProxyPort: 0, configPath: join(agentDir, 'proxy'), terminationDrainDuration: '1s' };
  const agent = new Running(start('pilot-agent', ['proxy'], { netns: pod.ns, uid: PROXY_UID, cwd: agentDir, env: { INSTANCE_IP: pod.ip, PROXY_CONFIG: JSON.stringify(proxyConfig), ...env } }));
  procs.push(agent);
  await eventually(async () => {
    const res = await fetch(`http://${pod.ip}:15021/healthz/ready`, { signal: AbortSignal.timeout(1000) });
    assert.equal(res.status, 200, `the agent is not ready yet:\n${agent.output}`);
  }, 30_000);
  return { discovery, agent };
}
