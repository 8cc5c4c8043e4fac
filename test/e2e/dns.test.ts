// DNS capture end to end, in a pod (network namespace): the application's port-53 traffic is
// redirected to the agent on :15053 (iptables written here: the capture helper's mesh-iptables is
// not on main yet). The agent answers a ServiceEntry host that has no address with the address the
// discovery server auto-allocated for it, and the sidecar's listener for that address carries the
// app's connection to the ServiceEntry's endpoint; a name outside the mesh is forwarded to the
// resolver of the pod's resolv.conf (one this test runs on the node's side of the veth). A headless
// ServiceEntry's host resolves to its endpoint's own address; a DestinationRule's PASSTHROUGH
// sends a connection to the address the app dialled.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pod, podsUnavailable, PROXY_UID, readableBy, startSidecarInPod } from '../helpers/netns.js';
import { REPO_ROOT, type Running, statValue } from '../helpers/proc.js';
import { TestResolver } from '../helpers/dns-resolver.js';

const unavailable = podsUnavailable() ?? (readableBy(PROXY_UID) ? undefined : `the checkout ${REPO_ROOT} is not readable by uid ${PROXY_UID}`);

interface External {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  readonly protocol: 'HTTP' | 'TCP';
  /** The endpoint's address and port. */
  readonly ip: string;
  readonly target: number;
  readonly resolution?: 'STATIC' | 'NONE';
  /** The ServiceEntry's address; without one, a STATIC host gets an auto-allocated one. */
  readonly address?: string;
}

/** A MESH_EXTERNAL ServiceEntry with one endpoint outside the pod. */
function external(e: External): string {
  const portName = e.protocol.toLowerCase();
  return `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {name: ${e.name}, namespace: default}
spec:
  hosts: ["${e.host}"]${e.address ? `\n  addresses: ["${e.address}"]` : ''}
  location: MESH_EXTERNAL
  resolution: ${e.resolution ?? 'STATIC'}
  ports: [{number: ${e.port}, name: ${portName}, protocol: ${e.protocol}}]
  endpoints: [{address: "${e.ip}", ports: {${portName}: ${e.target}}}]`;
}

/** An endpoint nothing answers at (TEST-NET-1): reaching it would mean the rule did not apply. */
const UNREACHABLE = '192.0.2.1';

/** The pod's own service gives the sidecar an inbound port (a virtualInbound without chains is refused). */
function config(podIp: string, outsideIp: string, outsidePort: number): string {
  return `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {name: app, namespace: default}
spec:
  hosts: ["app.default.svc.cluster.local"]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8000, name: http, protocol: HTTP}]
  endpoints: [{address: "${podIp}"}]
---
${external({ name: 'external-http', host: 'some-external-host.example', port: 80, protocol: 'HTTP', ip: outsideIp, target: outsidePort })}
---
${external({ name: 'external-tcp', host: 'tcp-external.example', port: 7000, protocol: 'TCP', ip: outsideIp, target: outsidePort })}
---
${external({ name: 'headless', host: 'db.headless.example', port: outsidePort, protocol: 'HTTP', ip: outsideIp, target: outsidePort, resolution: 'NONE' })}
---
${external({ name: 'moved', host: 'moved.example', port: outsidePort, protocol: 'HTTP', ip: UNREACHABLE, target: outsidePort, address: outsideIp })}
---
apiVersion: networking.mesh.io/v1
kind: DestinationRule
metadata: {name: moved, namespace: default}
spec:
  host: moved.example
  trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}
`;
}

/** Sidecar capture of TCP (as in capture.test.ts) plus DNS: UDP and TCP port 53 of everyone but the proxy's user to :15053. */
function captureRules(pod: Pod): void {
  const nat = (...args: string[]) => pod.exec('iptables', '-t', 'nat', ...args);
  nat('-N', 'MESH_OUTPUT');
  nat('-A', 'OUTPUT', '-p', 'tcp', '-j', 'MESH_OUTPUT');
  nat('-A', 'OUTPUT', '-p', 'udp', '--dport', '53', '-m', 'owner', '!', '--uid-owner', String(PROXY_UID), '-j', 'REDIRECT', '--to-ports', '15053');
  nat('-A', 'MESH_OUTPUT', '-m', 'owner', '--uid-owner', String(PROXY_UID), '-j', 'RETURN');
  nat('-A', 'MESH_OUTPUT', '-p', 'tcp', '--dport', '53', '-j', 'REDIRECT', '--to-ports', '15053');
  nat('-A', 'MESH_OUTPUT', '-d', '127.0.0.1/32', '-j', 'RETURN');
  nat('-A', 'MESH_OUTPUT', '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', '15001');
}

interface Outcome {
  address?: string;
  status?: number;
  body?: string;
  error?: string;
}

/**
 * What an application in the pod sees: the system resolver's answer for the URL's host (through
 * /etc/resolv.conf, so through the capture), then a GET of the URL. Not as the proxy's user.
 */
function appInPod(pod: Pod, url: string): Promise<Outcome> {
  const script = `
    const host = new URL(${JSON.stringify(url)}).hostname;
    require('node:dns').promises.lookup(host, { family: 4 }).then(
      ({ address }) => fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then(
        async (r) => ({ address, status: r.status, body: await r.text() }),
        (e) => ({ address, error: e.cause?.message ?? e.message })),
      (e) => ({ error: e.code ?? e.message }),
    ).then((o) => console.log(JSON.stringify(o)));`;
  return pod.runNode(script).then(({ out, err }) => {
    if (!out) throw new Error(`the app in the pod printed nothing: ${err}`);
    return JSON.parse(out) as Outcome;
  });
}

describe('DNS capture: the agent answers mesh names in a pod, the sidecar carries the connection', { skip: unavailable }, () => {
  let pod: Pod;
  const procs: Running[] = [];
  let outside: Server;
  let resolver: TestResolver;
  let netnsEtc: string;

  before(async () => {
    pod = Pod.create('dns-e2e', 20 + (process.pid % 30));
    // `ip netns exec` mounts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf for what runs in the pod.
    netnsEtc = join('/etc/netns', pod.ns);
    mkdirSync(netnsEtc, { recursive: true });
    writeFileSync(join(netnsEtc, 'resolv.conf'), `nameserver ${pod.hostIp}\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions timeout:2 attempts:2\n`);

    outside = createServer((req, res) => res.end(`outside served ${req.headers.host} ${req.url}`));
    await new Promise<void>((r) => outside.listen(0, pod.hostIp, r));
    const outsidePort = (outside.address() as AddressInfo).port;
    resolver = new TestResolver((q) => (q.name === 'outside.test' && q.type === 'A' ? [{ name: q.name, type: 'A', ttl: 30, data: pod.hostIp }] : undefined));
    await resolver.start(pod.hostIp, 53);

    const configDir = mkdtempSync(join(tmpdir(), 'mesh-dns-config-'));
    writeFileSync(join(configDir, 'mesh.yaml'), config(pod.ip, pod.hostIp, outsidePort));
    const agentDir = mkdtempSync(join(tmpdir(), 'mesh-dns-agent-'));
    chownSync(agentDir, PROXY_UID, PROXY_UID);
    captureRules(pod);

    const { agent } = await startSidecarInPod(pod, configDir, agentDir, { POD_NAME: 'app-1', POD_NAMESPACE: 'default', MESH_META_DNS_CAPTURE: 'true', MESH_META_DNS_AUTO_ALLOCATE: 'true' }, procs);
    await agent.waitFor(/name table updated/, 30_000);
  });

  after(async () => {
    await Promise.all(procs.reverse().map((p) => p.stop()));
    outside?.close();
    resolver?.close();
    pod?.destroy();
    if (netnsEtc) rmSync(netnsEtc, { recursive: true, force: true });
  });

  it('a ServiceEntry host without address resolves to its auto-allocated address and is reached through the sidecar', async () => {
    const o = await appInPod(pod, 'http://some-external-host.example/hello');
    assert.match(o.address ?? '', /^240\.240\.\d+\.\d+$/, JSON.stringify(o));
    assert.equal(o.status, 200, JSON.stringify(o));
    assert.equal(o.body, 'outside served some-external-host.example /hello');
    assert.ok(!resolver.asked.some((q) => q.includes('some-external-host')), `the mesh name went upstream: ${resolver.asked.join(', ')}`);
  });

  it('a TCP port of such a host has its listener at the allocated address', async () => {
    const o = await appInPod(pod, 'http://tcp-external.example:7000/raw');
    assert.equal(o.status, 200, JSON.stringify(o));
    assert.equal(o.body, 'outside served tcp-external.example:7000 /raw');
    const stats = await appInPod(pod, 'http://127.0.0.1:15000/stats');
    assert.equal(statValue(stats.body ?? '', `listener.${o.address}_7000.downstream_cx_total`), 1, `no connection on the listener of ${o.address}:7000`);
  });

  it('a headless ServiceEntry host (resolution NONE, no address) resolves to its endpoint, reached through the sidecar at that address', async () => {
    const port = (outside.address() as AddressInfo).port;
    const o = await appInPod(pod, `http://db.headless.example:${port}/direct`);
    assert.equal(o.address, pod.hostIp, JSON.stringify(o));
    assert.equal(o.status, 200, JSON.stringify(o));
    assert.equal(o.body, `outside served db.headless.example:${port} /direct`);
    assert.ok(!resolver.asked.some((q) => q.includes('headless.example')), `the mesh name went upstream: ${resolver.asked.join(', ')}`);
    const stats = await appInPod(pod, 'http://127.0.0.1:15000/stats');
    assert.equal(statValue(stats.body ?? '', `cluster.outbound|${port}||db.headless.example.upstream_rq_total`), 1, 'not through the service\'s cluster');
  });

  it('a DestinationRule\'s PASSTHROUGH sends the connection where the app dialled, not to the ServiceEntry\'s endpoint', async () => {
    const port = (outside.address() as AddressInfo).port;
    const o = await appInPod(pod, `http://moved.example:${port}/original`);
    assert.equal(o.address, pod.hostIp, JSON.stringify(o));
    assert.equal(o.status, 200, JSON.stringify(o));
    assert.equal(o.body, `outside served moved.example:${port} /original`);
    const stats = await appInPod(pod, 'http://127.0.0.1:15000/stats');
    assert.equal(statValue(stats.body ?? '', `cluster.outbound|${port}||moved.example.upstream_rq_total`), 1, 'not through the service\'s cluster');
  });

  it('a name outside the mesh is answered by the upstream resolver of resolv.conf', async () => {
    const port = (outside.address() as AddressInfo).port;
    const o = await appInPod(pod, `http://outside.test:${port}/via-upstream`);
    assert.equal(o.address, pod.hostIp, JSON.stringify(o));
    assert.equal(o.body, `outside served outside.test:${port} /via-upstream`);
    assert.ok(resolver.asked.includes('udp A outside.test'), `asked: ${resolver.asked.join(', ')}`);
  });
});
