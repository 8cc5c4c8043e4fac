// Traffic capture end to end: a pod (network namespace) runs the discovery server, the sample app
// and `pilot-agent proxy` as uid 1337, with the capture rules `pilot-agent mesh-iptables` installs
// as a sidecar's init container would: inbound TCP to virtualInbound (15006), outbound TCP of
// everything but the proxy to virtualOutbound (15001), some ports and CIDRs excluded. The proxy reads
// each connection's original destination (SO_ORIGINAL_DST) and hands it to the listener of that
// address. `--run-validation` proves the redirect before the proxy starts, and
// `mesh-clean-iptables` must leave iptables-save exactly as it was before.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { legacyUnavailable, Pod, podsUnavailable, PROXY_UID, readableBy, tproxyUnavailable } from '../helpers/netns.js';
import { discoveryArgs, eventually, REPO_ROOT, run, Running, start, statValue } from '../helpers/proc.js';

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

/** iptables-save without what changes by itself (comments with times, packet counters). */
function rulesOf(pod: Pod): string {
  return pod.exec('iptables-save').split('\n').filter((l) => !l.startsWith('#')).map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
}

/** Rules of the pod's own that capture must leave alone, one per table mesh-iptables writes to. */
function ownRules(pod: Pod): void {
  pod.exec('iptables', '-t', 'nat', '-A', 'POSTROUTING', '-p', 'udp', '--dport', '9', '-j', 'RETURN');
  pod.exec('iptables', '-t', 'mangle', '-A', 'PREROUTING', '-p', 'udp', '--dport', '9', '-j', 'RETURN');
  pod.exec('iptables', '-t', 'raw', '-A', 'PREROUTING', '-p', 'udp', '--dport', '9', '-j', 'RETURN');
  pod.exec('iptables', '-t', 'filter', '-A', 'INPUT', '-p', 'udp', '--dport', '9', '-j', 'ACCEPT');
}

interface Answer {
  status: number;
  body: string;
}

/** An HTTP GET made by a client process inside the pod (so its connection is captured). */
function getFromPod(pod: Pod, url: string): Promise<Answer> {
  const script = `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then(async (r) => console.log(JSON.stringify({ status: r.status, body: await r.text() })), (e) => { console.error(e.cause?.message ?? e.message); process.exit(1); });`;
  const [cmd, ...args] = pod.command([process.execPath, '-e', script]);
  const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) =>
    child.on('close', (code) => (code === 0 && out ? resolve(JSON.parse(out) as Answer) : reject(new Error(`GET ${url} from the pod failed: ${err.trim() || 'no answer'}`)))),
  );
}

/** A stat of the proxy's admin /stats, read from inside the pod. */
async function proxyStat(pod: Pod, name: string): Promise<number> {
  return statValue((await getFromPod(pod, 'http://127.0.0.1:15000/stats')).body, name);
}

/** A second address on the test's side, excluded from capture with -x. */
const excludedHost = (pod: Pod) => pod.hostIp.replace(/\.1$/, '.3');

interface Mesh {
  pod: Pod;
  procs: Running[];
  outside: Server;
  /** The same server, on a port excluded from capture with -o. */
  outsideExcludedPort: Server;
  /** The same server, on the address excluded from capture with -x. */
  outsideExcludedCidr: Server;
  before: string;
  captureOutput: string;
}

function serve(host: string): Promise<Server> {
  const server = createServer((req, res) => res.end(`outside saw ${req.socket.remoteAddress} ask for ${req.url}`));
  return new Promise<Server>((r) => server.listen(0, host, () => r(server)));
}

const portOf = (s: Server) => (s.address() as AddressInfo).port;

/** A pod with the mesh inside, captured by `pilot-agent mesh-iptables` in `mode`. */
async function startMesh(tag: string, subnet: number, mode: 'REDIRECT' | 'TPROXY'): Promise<Mesh> {
  const pod = Pod.create(tag, subnet);
  const procs: Running[] = [];
  const servers: Server[] = [];
  try {
    execFileSync('ip', ['addr', 'add', `${excludedHost(pod)}/24`, 'dev', pod.hostIf]);
    // Servers outside the mesh, on the test's side of the veth.
    const outside = await serve(pod.hostIp);
    const outsideExcludedPort = await serve(pod.hostIp);
    const outsideExcludedCidr = await serve(excludedHost(pod));
    servers.push(outside, outsideExcludedPort, outsideExcludedCidr);
    const configDir = mkdtempSync(join(tmpdir(), 'mesh-capture-config-'));
    writeFileSync(join(configDir, 'mesh.yaml'), config(pod.ip));
    // The agent runs as the proxy's user: its working directory (labels file, bootstrap) is its own.
    const agentDir = mkdtempSync(join(tmpdir(), 'mesh-capture-agent-'));
    mkdirSync(join(agentDir, 'etc', 'mesh', 'pod'), { recursive: true });
    writeFileSync(join(agentDir, 'etc', 'mesh', 'pod', 'labels'), 'app="httpbin"\n');
    for (const p of [agentDir, join(agentDir, 'etc'), join(agentDir, 'etc', 'mesh'), join(agentDir, 'etc', 'mesh', 'pod'), join(agentDir, 'etc', 'mesh', 'pod', 'labels')]) chownSync(p, PROXY_UID, PROXY_UID);

    ownRules(pod);
    const before = rulesOf(pod);
    // As an injector's init container: every inbound port but the agent's health port, all outbound
    // but one CIDR and one port, and a check that the redirect works before the proxy starts.
    const capture = await run(
      'pilot-agent',
      ['mesh-iptables', '-m', mode, '-u', String(PROXY_UID), '-g', String(PROXY_UID), '-b', '*', '-d', '15021', '-i', '*', '-x', `${excludedHost(pod)}/32`, '-o', String(portOf(outsideExcludedPort)), '--run-validation'],
      { netns: pod.ns },
    );
    assert.equal(capture.code, 0, `mesh-iptables failed:\n${capture.stdout}${capture.stderr}`);

    const [appCmd, ...appArgs] = pod.command([process.execPath, join(REPO_ROOT, 'dist', 'samples', 'apps', 'httpbin.js'), '8000', '0.0.0.0']);
    const app = new Running(spawn(appCmd!, appArgs, { stdio: ['ignore', 'pipe', 'pipe'] }));
    procs.push(app);
    const discovery = new Running(start('pilot-discovery', discoveryArgs(configDir, { grpcAddr: '127.0.0.1:15010' }), { netns: pod.ns }));
    procs.push(discovery);
    // Bounds for a loaded machine (the whole suite runs two files at a time).
    await app.waitFor(/httpbin listening/, 30_000);
    await discovery.waitFor(/gRPC xDS server listening/, 30_000);
    const proxyConfig = { discoveryAddress: '127.0.0.1:15010', xdsProxyPort: 0, configPath: join(agentDir, 'proxy'), terminationDrainDuration: '1s', interceptionMode: mode };
    const agent = new Running(
      start('pilot-agent', ['proxy'], {
        netns: pod.ns,
        uid: PROXY_UID,
        // TPROXY listeners bind with IP_TRANSPARENT, which needs CAP_NET_ADMIN (as the Go mesh's sidecar has in that mode).
        ...(mode === 'TPROXY' ? { caps: ['net_admin'] } : {}),
        cwd: agentDir,
        env: { POD_NAME: 'httpbin-1', POD_NAMESPACE: 'default', INSTANCE_IP: pod.ip, SERVICE_ACCOUNT: 'httpbin', PROXY_CONFIG: JSON.stringify(proxyConfig) },
      }),
    );
    procs.push(agent);
    await eventually(async () => {
      const res = await fetch(`http://${pod.ip}:15021/healthz/ready`, { signal: AbortSignal.timeout(1000) });
      assert.equal(res.status, 200, `the agent is not ready yet:\n${agent.output}`);
    }, 30_000);
    return { pod, procs, outside, outsideExcludedPort, outsideExcludedCidr, before, captureOutput: capture.stdout };
  } catch (e) {
    // A pod that never became ready is torn down here: its programs would keep the test file running.
    if (e instanceof Error) e.message = `${e.message}\n--- the pod's programs ---\n${procs.map((p) => p.output.slice(-2000)).join('\n---\n')}`;
    await Promise.all(procs.reverse().map((p) => p.stop()));
    for (const server of servers) server.close();
    pod.destroy();
    throw e;
  }
}

async function stopMesh(mesh: Mesh | undefined): Promise<void> {
  if (!mesh) return;
  await Promise.all(mesh.procs.reverse().map((p) => p.stop()));
  mesh.outside.close();
  mesh.outsideExcludedPort.close();
  mesh.outsideExcludedCidr.close();
  mesh.pod.destroy();
}

/**
 * The traffic assertions, the same whichever way inbound is captured but for the address the app
 * sees: under TPROXY the client's (original_src), under REDIRECT the proxy's.
 */
function trafficTests(mesh: () => Mesh, mode: 'REDIRECT' | 'TPROXY'): void {
  it('mesh-iptables validated the redirect before the proxy started', () => {
    assert.match(mesh().captureOutput, /validation passed: the capture rules redirect traffic/);
  });

  it('inbound: a connection to the app port is captured into virtualInbound and gets the inbound chain of port 8000', async () => {
    const { pod } = mesh();
    // The connection arrives on 15006; only its original destination port selects the chain whose
    // RBAC denies /admin, so the 403 shows both the capture and the restored destination.
    const denied = await fetch(`http://${pod.ip}:8000/admin/users`);
    assert.equal(denied.status, 403);
    assert.equal(await denied.text(), 'RBAC: access denied');
    const ok = await fetch(`http://${pod.ip}:8000/headers`);
    assert.equal(ok.status, 200);
    const headers = ((await ok.json()) as { headers: Record<string, string> }).headers;
    assert.ok(headers['X-Request-Id'], `the inbound proxy did not add x-request-id: ${JSON.stringify(headers)}`);
  });

  it(`inbound: the app sees ${mode === 'TPROXY' ? "the client's address (original_src from its IP to the pod's own)" : "the proxy's address (127.0.0.1)"}`, async () => {
    const { pod } = mesh();
    // This test's process is the client, on the other side of the veth (hostIp); the request id the
    // inbound proxy adds shows the request went through it.
    const res = await fetch(`http://${pod.ip}:8000/get`);
    assert.equal(res.status, 200, await res.clone().text());
    const seen = (await res.json()) as { origin: string; headers: Record<string, string> };
    assert.ok(seen.headers['X-Request-Id'], `the request did not go through the inbound proxy: ${JSON.stringify(seen.headers)}`);
    assert.equal(seen.origin, mode === 'TPROXY' ? pod.hostIp : '127.0.0.1');
  });

  it('outbound: a connection to a service VIP is handed from virtualOutbound to the listener of the service port, then crosses inbound capture to the app', async () => {
    const { pod } = mesh();
    const before = await proxyStat(pod, 'listener.0.0.0.0_9080.downstream_cx_total');
    const inboundBefore = await proxyStat(pod, 'listener.0.0.0.0_15006.downstream_cx_total');
    const res = await getFromPod(pod, `http://${VIP}:9080/ip`);
    assert.equal(res.status, 200, res.body);
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_9080.downstream_cx_total'), before + 1);
    // As in the Go mesh, the proxy's own connection to its pod's address (uid 1337 over lo) is
    // captured inbound (MESH_OUTPUT -> MESH_IN_REDIRECT): app -> outbound -> inbound -> app, once
    // (no loop). The app sees the inbound side's client, the outbound proxy at the pod's address,
    // under TPROXY; the inbound cluster's connection from 127.0.0.1 under REDIRECT.
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_15006.downstream_cx_total'), inboundBefore + 1);
    assert.deepEqual(JSON.parse(res.body), { origin: mode === 'TPROXY' ? pod.ip : '127.0.0.1' });
  });

  it('passthrough: a connection to an address outside the mesh leaves through virtualOutbound to where the client sent it', async () => {
    const { pod, outside } = mesh();
    const before = await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total');
    const res = await getFromPod(pod, `http://${pod.hostIp}:${portOf(outside)}/from-the-pod`);
    assert.equal(res.status, 200);
    assert.equal(res.body, `outside saw ${pod.ip} ask for /from-the-pod`);
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total'), before + 1);
  });

  it('loop blocker: a connection made to 15001 itself is closed by virtualOutbound, not passed through to 15001 again', async () => {
    const { pod } = mesh();
    const before = await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total');
    const blackholed = await proxyStat(pod, 'tcp.BlackHoleCluster.downstream_cx_total');
    await assert.rejects(getFromPod(pod, `http://${pod.ip}:15001/loop`), /GET .* from the pod failed/);
    await new Promise((r) => setTimeout(r, 500));
    // The virtualOutbound-blackhole chain took it (the Go mesh's config), not the passthrough catch-all.
    assert.equal(await proxyStat(pod, 'tcp.BlackHoleCluster.downstream_cx_total'), blackholed + 1);
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total'), before + 1, "one connection, the client's");
  });

  it('an excluded outbound port (-o) and an excluded CIDR (-x) bypass the proxy', async () => {
    const { pod, outsideExcludedPort, outsideExcludedCidr } = mesh();
    const before = await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total');
    const byPort = await getFromPod(pod, `http://${pod.hostIp}:${portOf(outsideExcludedPort)}/excluded-port`);
    assert.equal(byPort.body, `outside saw ${pod.ip} ask for /excluded-port`);
    const byCidr = await getFromPod(pod, `http://${excludedHost(pod)}:${portOf(outsideExcludedCidr)}/excluded-cidr`);
    assert.equal(byCidr.body, `outside saw ${pod.ip} ask for /excluded-cidr`);
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_15001.downstream_cx_total'), before, 'an excluded connection went through virtualOutbound');
  });

  it('an excluded inbound port (-d) reaches the pod without the proxy: the agent answers 15021 itself', async () => {
    const { pod } = mesh();
    const before = await proxyStat(pod, 'listener.0.0.0.0_15006.downstream_cx_total');
    const res = await fetch(`http://${pod.ip}:15021/healthz/ready`);
    assert.equal(res.status, 200);
    assert.equal(await proxyStat(pod, 'listener.0.0.0.0_15006.downstream_cx_total'), before);
  });

  it('mesh-clean-iptables leaves iptables-save exactly as before mesh-iptables, and a second run changes nothing', async () => {
    const { pod, before } = mesh();
    assert.notEqual(rulesOf(pod), before, 'mesh-iptables changed nothing');
    const clean = await run('pilot-agent', ['mesh-clean-iptables', '-u', String(PROXY_UID)], { netns: pod.ns });
    assert.equal(clean.code, 0, clean.stderr);
    assert.equal(rulesOf(pod), before);
    assert.doesNotMatch(pod.exec('ip', 'rule', 'show'), /fwmark/);
    const again = await run('pilot-agent', ['mesh-clean-iptables', '-u', String(PROXY_UID)], { netns: pod.ns });
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /IPv4: no mesh rules found/);
    assert.equal(rulesOf(pod), before);
  });
}

const subnet = 50 + (process.pid % 40) * 5;

describe('traffic capture by pilot-agent mesh-iptables, REDIRECT mode', { skip: unavailable }, () => {
  let mesh: Mesh | undefined;
  before(async () => {
    mesh = await startMesh('cap-redirect', subnet, 'REDIRECT');
  });
  after(() => stopMesh(mesh));
  trafficTests(() => mesh!, 'REDIRECT');
});

describe('traffic capture by pilot-agent mesh-iptables, TPROXY mode', { skip: unavailable ?? tproxyUnavailable() }, () => {
  let mesh: Mesh | undefined;
  before(async () => {
    mesh = await startMesh('cap-tproxy', subnet + 1, 'TPROXY');
  });
  after(() => stopMesh(mesh));

  it('inbound is captured by mangle TPROXY with policy routing to lo, not by nat', () => {
    const rules = mesh!.pod.exec('iptables-save', '-t', 'mangle');
    assert.match(rules, /-A MESH_TPROXY ! -d 127\.0\.0\.1\/32 -p tcp -j TPROXY --on-port 15006/);
    assert.match(mesh!.pod.exec('ip', 'rule', 'show'), /fwmark 0x539 lookup 133/);
    assert.doesNotMatch(mesh!.pod.exec('iptables-save', '-t', 'nat'), /-A PREROUTING -p tcp -j MESH_INBOUND/);
  });

  trafficTests(() => mesh!, 'TPROXY');
});

describe('mesh-iptables --run-validation without capture rules', { skip: unavailable }, () => {
  it('fails with exit code 126 and says the rules are not in place', async () => {
    const pod = Pod.create('cap-novalid', subnet + 2);
    try {
      const r = await run('pilot-agent', ['mesh-iptables', '-u', String(PROXY_UID), '--skip-rule-apply', '--run-validation', '--probe-timeout', '1s'], { netns: pod.ns });
      assert.equal(r.code, 126, r.stdout + r.stderr);
      assert.match(r.stderr, /validation failed: no connection to 127\.0\.0\.6:15002 was redirected .* the traffic capture rules are not in place/);
      assert.doesNotMatch(pod.exec('iptables-save'), /MESH_/);
    } finally {
      pod.destroy();
    }
  });
});

/** A DNS-port server answering every UDP datagram and TCP connection with `name`. */
const ANSWER_SCRIPT = (host: string, port: number, name: string) => `
const dgram = require('node:dgram'), net = require('node:net');
const u = dgram.createSocket('udp4');
u.on('message', (m, r) => u.send(${JSON.stringify(name)}, r.port, r.address));
u.bind(${port}, ${JSON.stringify(host)}, () => net.createServer((c) => c.end(${JSON.stringify(name)})).listen(${port}, ${JSON.stringify(host)}, () => console.log('answering')));
`;

/** A query to `host`:53 from inside the pod (as `uid`): who answered, over UDP and over TCP. */
const ASK_SCRIPT = (host: string) => `
const dgram = require('node:dgram'), net = require('node:net');
const s = dgram.createSocket('udp4');
const t = setTimeout(() => { console.log(JSON.stringify({ udp: 'no answer' })); process.exit(0); }, 3000);
s.on('message', (m) => {
  clearTimeout(t);
  s.close();
  const c = net.connect(53, ${JSON.stringify(host)});
  let tcp = '';
  c.on('data', (d) => (tcp += d));
  c.on('error', (e) => console.log(JSON.stringify({ udp: String(m), tcp: e.code })));
  c.on('end', () => console.log(JSON.stringify({ udp: String(m), tcp })));
});
s.send('query', 53, ${JSON.stringify(host)});
`;

describe('mesh-iptables --redirect-dns', { skip: unavailable }, () => {
  let pod: Pod | undefined;
  let agentDns: Running | undefined;
  const upstream = createSocket('udp4');
  const upstreamTcp = createTcpServer((c) => c.end('upstream'));

  before(async () => {
    pod = Pod.create('cap-dns', subnet + 3);
    // `ip netns exec` shows the pod this file as /etc/resolv.conf: its name server is on the test's side.
    mkdirSync(join('/etc/netns', pod.ns), { recursive: true });
    writeFileSync(join('/etc/netns', pod.ns, 'resolv.conf'), `nameserver ${pod.hostIp}\n`);
    upstream.on('message', (_m, r) => upstream.send('upstream', r.port, r.address));
    await new Promise<void>((r) => upstream.bind(53, pod!.hostIp, r));
    await new Promise<void>((r) => upstreamTcp.listen(53, pod!.hostIp, r));
    const capture = await run('pilot-agent', ['mesh-iptables', '-u', String(PROXY_UID), '-g', String(PROXY_UID), '--redirect-dns'], { netns: pod.ns });
    assert.equal(capture.code, 0, capture.stdout + capture.stderr);
    // Where the agent's DNS proxy listens, a server of the agent's user answering "agent".
    const [cmd, ...args] = pod.command([process.execPath, '-e', ANSWER_SCRIPT('127.0.0.1', 15053, 'agent')], PROXY_UID);
    agentDns = new Running(spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    await agentDns.waitFor(/answering/);
  });

  after(async () => {
    await agentDns?.stop();
    upstream.close();
    upstreamTcp.close();
    if (pod) rmSync(join('/etc/netns', pod.ns), { recursive: true, force: true });
    pod?.destroy();
  });

  async function ask(uid?: number): Promise<{ udp: string; tcp: string }> {
    const [cmd, ...args] = pod!.command([process.execPath, '-e', ASK_SCRIPT(pod!.hostIp)], uid);
    const r = new Running(spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    await r.wait();
    return JSON.parse(r.output.trim()) as { udp: string; tcp: string };
  }

  it("the application's DNS to its name server, UDP and TCP, goes to the agent on 127.0.0.1:15053", async () => {
    assert.deepEqual(await ask(), { udp: 'agent', tcp: 'agent' });
  });

  it("the agent's own queries (its uid) reach the name server", async () => {
    assert.deepEqual(await ask(PROXY_UID), { udp: 'upstream', tcp: 'upstream' });
  });

  it('mesh-clean-iptables removes the DNS rules: the application reaches the name server again', async () => {
    const clean = await run('pilot-agent', ['mesh-clean-iptables', '-u', String(PROXY_UID)], { netns: pod!.ns });
    assert.equal(clean.code, 0, clean.stderr);
    assert.doesNotMatch(pod!.exec('iptables-save'), /MESH_/);
    assert.deepEqual(await ask(), { udp: 'upstream', tcp: 'upstream' });
  });
});

describe('mesh-iptables picks the iptables backend the pod already uses', { skip: unavailable ?? legacyUnavailable() }, () => {
  it('legacy rules in the pod: capture goes to legacy (not nft), and clean finds it there', async () => {
    const pod = Pod.create('cap-legacy', subnet + 4);
    try {
      pod.exec('iptables-legacy', '-t', 'filter', '-A', 'INPUT', '-p', 'udp', '--dport', '9', '-j', 'ACCEPT');
      const r = await run('pilot-agent', ['mesh-iptables', '-u', String(PROXY_UID), '-b', '*', '-i', '*'], { netns: pod.ns });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /with iptables-legacy-restore/);
      assert.match(pod.exec('iptables-legacy-save'), /-A OUTPUT -j MESH_OUTPUT/);
      assert.doesNotMatch(pod.exec('iptables-nft-save'), /MESH_/);
      const clean = await run('pilot-agent', ['mesh-clean-iptables', '-u', String(PROXY_UID)], { netns: pod.ns });
      assert.equal(clean.code, 0, clean.stderr);
      assert.match(clean.stdout, /IPv4: removed 2 rules and 4 chains \(legacy\)/);
      assert.doesNotMatch(pod.exec('iptables-legacy-save'), /MESH_/);
      assert.match(pod.exec('iptables-legacy-save'), /-A INPUT -p udp -m udp --dport 9 -j ACCEPT/);
    } finally {
      pod.destroy();
    }
  });
});

describe('mesh-iptables and mesh-clean-iptables in a pod with an IPv6 address', { skip: unavailable }, () => {
  it('capture adds ip6tables rules and ::6 on lo; clean removes both, and a second clean changes nothing', async () => {
    const pod = Pod.create('rem-v6', 5 + (process.pid % 15));
    const saved = () => pod.exec('ip6tables-save').split('\n').filter((l) => !l.startsWith('#')).map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
    const loAddresses = () => pod.exec('ip', '-6', 'addr', 'show', 'dev', 'lo');
    try {
      pod.exec('ip', '-6', 'addr', 'add', 'fd00:213::2/64', 'dev', pod.podIf, 'nodad');
      // A rule of the pod's own, so the tables exist before capture on either backend.
      pod.exec('ip6tables', '-t', 'nat', '-A', 'POSTROUTING', '-p', 'udp', '--dport', '9', '-j', 'RETURN');
      const before = saved();
      const capture = await run('pilot-agent', ['mesh-iptables', '-u', String(PROXY_UID), '-b', '*', '-i', '*'], { netns: pod.ns });
      assert.equal(capture.code, 0, capture.stdout + capture.stderr);
      assert.match(saved(), /-A OUTPUT -j MESH_OUTPUT\n/);
      assert.match(loAddresses(), /inet6 ::6\/128 /);
      for (let round = 1; round <= 2; round++) {
        const clean = await run('pilot-agent', ['mesh-clean-iptables', '-u', String(PROXY_UID)], { netns: pod.ns });
        assert.equal(clean.code, 0, `clean run ${round}: ${clean.stderr}`);
        assert.doesNotMatch(loAddresses(), /inet6 ::6\/128 /, `clean run ${round} left ::6 on lo`);
        assert.equal(saved(), before, `clean run ${round} did not restore ip6tables-save`);
      }
      const dry = await run('pilot-agent', ['mesh-clean-iptables', '-n'], { netns: pod.ns });
      assert.doesNotMatch(dry.stdout, /addr del/, 'a clean with nothing left still plans to remove the address');
    } finally {
      pod.destroy();
    }
  });
});
