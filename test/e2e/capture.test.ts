// use_original_dst under real traffic capture: a pod (network namespace) runs the discovery server,
// the sample app and `pilot-agent proxy` as uid 1337, with iptables REDIRECT rules like a sidecar
// injector's: inbound TCP to virtualInbound (15006), outbound TCP of everything but the proxy to
// virtualOutbound (15001). The proxy reads each connection's original destination with
// SO_ORIGINAL_DST and hands it to the listener of that address.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pod, podsUnavailable, PROXY_UID, readableBy, startSidecarInPod } from '../helpers/netns.js';
import { REPO_ROOT, Running, statValue } from '../helpers/proc.js';

const VIP = '10.96.7.7';

const unavailable = podsUnavailable() ?? (readableBy(PROXY_UID) ? undefined : `the checkout ${REPO_ROOT} is not readable by uid ${PROXY_UID}`);

function config(podIp: string): string {
  return `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {name: httpbin, namespace: default}
spec:
  hosts: ["httpbin.default.svc.cluster.local"]
  addresses: ["${VIP}"]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP, targetPort: 8000}]
  workloadSelector: {labels: {app: httpbin}}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {name: httpbin-1, namespace: default}
spec: {address: "${podIp}", labels: {app: httpbin}, serviceAccount: httpbin}
---
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`;
}

/** The capture rules of a sidecar, as an injector's init container installs them. */
function captureRules(pod: Pod): void {
  const nat = (...args: string[]) => pod.exec('iptables', '-t', 'nat', ...args);
  nat('-N', 'MESH_INBOUND');
  nat('-A', 'PREROUTING', '-p', 'tcp', '-j', 'MESH_INBOUND');
  nat('-A', 'MESH_INBOUND', '-p', 'tcp', '--dport', '15021', '-j', 'RETURN');
  nat('-A', 'MESH_INBOUND', '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', '15006');
  nat('-N', 'MESH_OUTPUT');
  nat('-A', 'OUTPUT', '-p', 'tcp', '-j', 'MESH_OUTPUT');
  nat('-A', 'MESH_OUTPUT', '-m', 'owner', '--uid-owner', String(PROXY_UID), '-j', 'RETURN');
  nat('-A', 'MESH_OUTPUT', '-d', '127.0.0.1/32', '-j', 'RETURN');
  nat('-A', 'MESH_OUTPUT', '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', '15001');
}

interface Answer {
  status: number;
  body: string;
}

/** An HTTP GET made by a client process inside the pod (so its connection is captured). */
function getFromPod(pod: Pod, url: string): Promise<Answer> {
  const script = `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then(async (r) => console.log(JSON.stringify({ status: r.status, body: await r.text() })), (e) => { console.error(e.cause?.message ?? e.message); process.exit(1); });`;
  return pod.runNode(script).then(({ code, out, err }) => {
    if (code === 0 && out) return JSON.parse(out) as Answer;
    throw new Error(`GET ${url} from the pod failed: ${err.trim() || 'no answer'}`);
  });
}

/** A stat of the proxy's admin /stats, read from inside the pod. */
async function proxyStat(pod: Pod, name: string): Promise<number> {
  return statValue((await getFromPod(pod, 'http://127.0.0.1:15000/stats')).body, name);
}

describe('traffic capture: use_original_dst with iptables REDIRECT in a pod', { skip: unavailable }, () => {
  let pod: Pod;
  const procs: Running[] = [];
  let outside: Server;

  before(async () => {
    pod = Pod.create('mesh-cap', 50 + (process.pid % 200));
    const configDir = mkdtempSync(join(tmpdir(), 'mesh-capture-config-'));
    writeFileSync(join(configDir, 'mesh.yaml'), config(pod.ip));
    // The agent runs as the proxy's user: its working directory (labels file, bootstrap) is its own.
    const agentDir = mkdtempSync(join(tmpdir(), 'mesh-capture-agent-'));
    mkdirSync(join(agentDir, 'etc', 'mesh', 'pod'), { recursive: true });
    writeFileSync(join(agentDir, 'etc', 'mesh', 'pod', 'labels'), 'app="httpbin"\n');
    for (const p of [agentDir, join(agentDir, 'etc'), join(agentDir, 'etc', 'mesh'), join(agentDir, 'etc', 'mesh', 'pod'), join(agentDir, 'etc', 'mesh', 'pod', 'labels')]) chownSync(p, PROXY_UID, PROXY_UID);
    captureRules(pod);

    const [appCmd, ...appArgs] = pod.command([process.execPath, join(REPO_ROOT, 'dist', 'samples', 'apps', 'httpbin.js'), '8000', '0.0.0.0']);
    const app = new Running(spawn(appCmd!, appArgs, { stdio: ['ignore', 'pipe', 'pipe'] }));
    procs.push(app);
    await app.waitFor(/httpbin listening/);
    await startSidecarInPod(pod, configDir, agentDir, { POD_NAME: 'httpbin-1', POD_NAMESPACE: 'default', SERVICE_ACCOUNT: 'httpbin' }, procs);

    // A server outside the mesh, on the test's side of the veth.
    outside = createServer((req, res) => res.end(`outside saw ${req.socket.remoteAddress} ask for ${req.url}`));
    await new Promise<void>((r) => outside.listen(0, pod.hostIp, r));
  });

  after(async () => {
    await Promise.all(procs.reverse().map((p) => p.stop()));
    outside?.close();
    pod?.destroy();
  });

  it('inbound: a connection to the app port is redirected to virtualInbound and gets the inbound chain of port 8000', async () => {
    // The connection arrives on 15006; only its original destination port selects the chain whose
    // RBAC denies /admin, so the 403 shows both the redirect and the restored destination.
    const denied = await fetch(`http://${pod.ip}:8000/admin/users`);
    assert.equal(denied.status, 403);
    assert.equal(await denied.text(), 'RBAC: access denied');
    const ok = await fetch(`http://${pod.ip}:8000/headers`);
    assert.equal(ok.status, 200);
    const headers = ((await ok.json()) as { headers: Record<string, string> }).headers;
    assert.ok(headers['X-Request-Id'], `the inbound proxy did not add x-request-id: ${JSON.stringify(headers)}`);
  });

  it('outbound: a connection to a service VIP is handed from virtualOutbound to the listener of the service port', async () => {
    const before = await proxyStat(pod, 'listener.0.0.0.0_9080.downstream_cx_total');
    const res = await getFromPod(pod, `http://${VIP}:9080/ip`);
    assert.equal(res.status, 200, res.body);
    // The app saw the proxy's connection from the pod's own address, not the VIP's client.
    assert.deepEqual(JSON.parse(res.body), { origin: pod.ip });
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_9080.downstream_cx_total'), before + 1);
  });

  it('passthrough: a connection to an address outside the mesh leaves through virtualOutbound to where the client sent it', async () => {
    const port = (outside.address() as AddressInfo).port;
    const before = await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total');
    const res = await getFromPod(pod, `http://${pod.hostIp}:${port}/from-the-pod`);
    assert.equal(res.status, 200);
    assert.equal(res.body, `outside saw ${pod.ip} ask for /from-the-pod`);
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total'), before + 1);
  });
});
