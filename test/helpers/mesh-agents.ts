// `pilot-agent proxy` workloads for end-to-end tests: each a real agent process (its certificate
// from the discovery server's CA over SDS) running a real mesh-proxy, interception NONE, labelled
// `app=<name>` with the service account <name>; their output and the proxy's TLS and cluster stats
// for failure messages.
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../samples/local-mesh.js';
import type { CaDiscovery } from './mesh-ca.js';
import { eventually, Running, start } from './proc.js';

const admins = new Map<Running, number>();

/** What a test adds to an agent: ProxyConfig fields and variables over the defaults here. */
export interface AgentExtras {
  readonly proxyConfig?: Record<string, unknown>;
  readonly env?: Record<string, string>;
}

/** An agent with its token, trusting the CA on the secured port; ready once its proxy is. */
export async function meshAgent(t: TestContext, d: CaDiscovery, token: string, name: string, ip: string, extras: AgentExtras = {}): Promise<Running> {
  const dir = mkdtempSync(join(tmpdir(), `mesh-mtls-${name}-`));
  mkdirSync(join(dir, 'etc', 'mesh', 'pod'), { recursive: true });
  writeFileSync(join(dir, 'etc', 'mesh', 'pod', 'labels'), `app="${name}"\n`);
  mkdirSync(join(dir, 'var', 'run', 'secrets', 'tokens'), { recursive: true });
  writeFileSync(join(dir, 'var', 'run', 'secrets', 'tokens', 'mesh-token'), token, { mode: 0o600 });
  const port = d.secureAddress.split(':').pop();
  const status = await freePort();
  const admin = await freePort();
  const pc = { discoveryAddress: `localhost:${port}`, proxyAdminPort: admin, statusPort: status, metricsPort: 0, xdsProxyPort: 0, interceptionMode: 'NONE', configPath: join(dir, 'proxy'), concurrency: 1, terminationDrainDuration: '1s', ...extras.proxyConfig };
  const a = new Running(
    start('pilot-agent', ['proxy'], {
      cwd: dir,
      env: { POD_NAME: `${name}-1`, POD_NAMESPACE: 'default', SERVICE_ACCOUNT: name, INSTANCE_IP: ip, XDS_ROOT_CA: join(d.caDir, 'root-cert.pem'), PROXY_CONFIG: JSON.stringify(pc), ...extras.env },
    }),
  );
  t.after(() => a.stop());
  await eventually(async () => assert.equal((await fetch(`http://127.0.0.1:${status}/healthz/ready`)).status, 200), 60_000).catch((e: Error) => {
    throw new Error(`${name} agent not ready: ${e.message}\n${a.output}`);
  });
  admins.set(a, admin);
  return a;
}

/** The admin port of an agent's proxy. */
export function adminPortOf(a: Running): number {
  return admins.get(a)!;
}

/** An agent's output and its proxy's clusters and TLS/rbac stats, for failure messages. */
export async function agentState(name: string, a: Running): Promise<string> {
  const admin = admins.get(a);
  const get = async (path: string) => (await fetch(`http://127.0.0.1:${admin}${path}`).then((r) => r.text()).catch((e: Error) => e.message)).split('\n').filter((l) => /ssl|cx_connect_fail|tls|rbac|outbound\|/.test(l)).join('\n');
  return `--- ${name}\n${a.output}\n${await get('/clusters')}\n${await get('/stats')}`;
}

export interface ServerWorkload {
  /** The service's hostname and ServiceEntry name. */
  readonly host: string;
  readonly serviceName: string;
  /** The port's name and protocol, the same on the workload, the service and the Sidecar ingress; no protocol: sniffed. */
  readonly portName: string;
  readonly protocol?: 'HTTP' | 'TCP';
  /** The app's port, the sidecar's inbound port, the service port, and a port for the server's own outbound listeners. */
  readonly app: number;
  readonly inbound: number;
  readonly service: number;
  readonly unused: number;
}

/**
 * The config of a `server` workload at 127.0.0.1 with a sidecar (tlsMode mesh): its WorkloadEntry,
 * the ServiceEntry selecting it, and a Sidecar whose ingress (captureMode NONE) leads to the app.
 */
export function serverWorkloadYaml(w: ServerWorkload): string {
  const protocol = w.protocol ? `, protocol: ${w.protocol}` : '';
  return `
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {namespace: default, name: server-1}
spec: {address: 127.0.0.1, ports: {${w.portName}: ${w.inbound}}, labels: {app: server, security.mesh.io/tlsMode: mesh}, serviceAccount: server}
---
apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {namespace: default, name: ${w.serviceName}}
spec:
  hosts: [${w.host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: ${w.service}, name: ${w.portName}${protocol}}]
  workloadSelector: {labels: {app: server}}
---
apiVersion: networking.mesh.io/v1
kind: Sidecar
metadata: {namespace: default, name: server}
spec:
  workloadSelector: {labels: {app: server}}
  ingress: [{port: {number: ${w.inbound}${protocol}, name: ${w.portName}}, defaultEndpoint: "127.0.0.1:${w.app}", captureMode: NONE}]
  # Its outbound listeners elsewhere than the client's (both proxies share the loopback).
  egress: [{port: {number: ${w.unused}${protocol}, name: ${w.portName}}, hosts: ["./*"]}]
`;
}
