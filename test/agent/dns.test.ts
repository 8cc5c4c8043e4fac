// The agent's DNS proxy: resolv.conf, the lookup table, and the server over real UDP and TCP
// sockets, forwarding to a fake upstream resolver on 127.0.0.1 that this test runs.
import { after, before, describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { create } from '@bufbuild/protobuf';
import dnsPacket, { type Answer, type DecodedPacket, type Question } from 'dns-packet';
import { NameTableSchema, type NameTable } from '../../src/gen/mesh/v1/dns_pb.js';
import { DnsProxy } from '../../src/agent/dns/dns-proxy.js';
import { DnsForwarder } from '../../src/agent/dns/forwarder.js';
import { parseResolvConf, ResolvConfError } from '../../src/agent/dns/resolv-conf.js';
import { DnsResolver } from '../../src/agent/dns/resolver.js';
import { DnsServer } from '../../src/agent/dns/server.js';
import { LookupTable } from '../../src/agent/dns/table.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setScopeLevel } from '../../src/common/log.js';
import { TestResolver, type Reply } from '../helpers/dns-resolver.js';

setScopeLevel('dns', 'error');

const SEARCH = ['foo.svc.cluster.local', 'svc.cluster.local', 'cluster.local'];

function nameTable(): NameTable {
  return create(NameTableSchema, {
    table: {
      'reviews.foo.svc.cluster.local': { ips: ['10.96.0.1'], registry: 'Mock', shortname: 'reviews', namespace: 'foo' },
      'ratings.bar.svc.cluster.local': { ips: ['10.96.0.2', 'fd00::2'], registry: 'Mock', shortname: 'ratings', namespace: 'bar' },
      'api.example.com': { ips: ['240.240.0.7'], registry: 'ServiceEntry' },
      '*.wild.example.com': { ips: ['10.7.0.1'], registry: 'ServiceEntry' },
    },
  });
}

function lookupTable(): LookupTable {
  return new LookupTable(nameTable(), { namespace: 'foo', domain: 'foo.svc.cluster.local', search: SEARCH });
}

function data(answers: Answer[] | undefined): string[] | undefined {
  return answers?.map((a) => `${a.name} ${a.type} ${String((a as { data: unknown }).data)}`);
}

test('resolv.conf: nameservers, the last search/domain line, timeout and attempts with bounds; a bad nameserver is named', () => {
  const conf = parseResolvConf('# comment\nnameserver 10.0.0.10\nnameserver fe80::1%eth0\ndomain x.example\nsearch foo.svc.cluster.local. svc.cluster.local\noptions ndots:5 timeout:0 attempts:9\n');
  assert.deepEqual(conf.servers, [{ host: '10.0.0.10', port: 53 }, { host: 'fe80::1', port: 53 }]);
  assert.deepEqual(conf.search, ['foo.svc.cluster.local', 'svc.cluster.local']);
  assert.equal(conf.timeoutMs, 1000);
  assert.equal(conf.attempts, 5);
  assert.deepEqual(parseResolvConf('').search, []);
  assert.equal(parseResolvConf('').timeoutMs, 5000);
  assert.throws(() => parseResolvConf('nameserver dns.example\n', '/etc/resolv.conf'), (e: Error) => e instanceof ResolvConfError && /\/etc\/resolv\.conf: nameserver "dns\.example": expected an IP address/.test(e.message));
  assert.throws(() => parseResolvConf('options timeout:x\n'), /options timeout:x: expected a whole number/);
});

test('lookup table: full names, short names from the proxy namespace only, name.ns and name.ns.svc from anywhere', () => {
  const t = lookupTable();
  assert.deepEqual(data(t.lookup('reviews.foo.svc.cluster.local.', 'A')), ['reviews.foo.svc.cluster.local. A 10.96.0.1']);
  assert.deepEqual(data(t.lookup('reviews', 'A')), ['reviews A 10.96.0.1']);
  assert.deepEqual(data(t.lookup('reviews.foo', 'A')), ['reviews.foo A 10.96.0.1']);
  assert.deepEqual(data(t.lookup('Reviews.Foo.Svc', 'A')), ['Reviews.Foo.Svc A 10.96.0.1']);
  assert.equal(t.lookup('ratings', 'A'), undefined, 'another namespace: no bare short name');
  assert.deepEqual(data(t.lookup('ratings.bar', 'AAAA')), ['ratings.bar AAAA fd00::2']);
  assert.equal(t.lookup('api.example', 'A'), undefined, 'ServiceEntry hosts have no short names');
});

test('lookup table: the first search domain appended answers a CNAME; known names without the type are empty; wildcards; other types forwarded', () => {
  const t = lookupTable();
  assert.deepEqual(data(t.lookup('api.example.com.foo.svc.cluster.local', 'A')), [
    'api.example.com.foo.svc.cluster.local CNAME api.example.com',
    'api.example.com A 240.240.0.7',
  ]);
  assert.deepEqual(data(t.lookup('reviews.foo.svc.cluster.local', 'A')), ['reviews.foo.svc.cluster.local A 10.96.0.1'], 'a real name is not an alias');
  assert.equal(t.lookup('api.example.com.svc.cluster.local', 'A'), undefined, 'only the first search domain, as the Go agent');
  assert.deepEqual(t.lookup('api.example.com', 'AAAA'), []);
  assert.deepEqual(data(t.lookup('a.b.wild.example.com', 'A')), ['a.b.wild.example.com A 10.7.0.1']);
  assert.equal(t.lookup('wild.example.com', 'A'), undefined);
  assert.equal(t.lookup('api.example.com', 'TXT'), undefined);
  assert.equal(t.lookup('www.example.org', 'A'), undefined);
});

/** A resolver outside the mesh: outside.test A, big.test (truncated over UDP, 60 records over TCP), silent.test never answered. */
function upstreamAnswer(q: Question, transport: 'udp' | 'tcp'): Reply {
  if (q.name === 'silent.test') return 'silent';
  if (q.name === 'outside.test' && q.type === 'A') return [{ name: 'outside.test', type: 'A', ttl: 60, data: '192.0.2.10' }];
  if (q.name !== 'big.test') return undefined;
  if (transport === 'udp') return 'truncate';
  return Array.from({ length: 60 }, (_, i) => ({ name: 'big.test', type: 'A' as const, ttl: 60, data: `192.0.2.${i + 1}` }));
}

let nextId = 1;
function query(name: string, type: 'A' | 'AAAA' | 'TXT', edns = false): Buffer {
  return dnsPacket.encode({
    type: 'query',
    id: nextId++,
    flags: dnsPacket.RECURSION_DESIRED,
    questions: [{ name, type, class: 'IN' }],
    ...(edns ? { additionals: [{ type: 'OPT', name: '.', udpPayloadSize: 4096, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }] } : {}),
  });
}

function overUdp(port: number, msg: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = createSocket('udp4');
    s.on('error', reject);
    s.on('message', (m) => {
      s.close();
      resolve(m);
    });
    s.send(msg, port, '127.0.0.1');
  });
}

function overTcp(port: number, msgs: Buffer[]): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    const out: Buffer[] = [];
    let buf = Buffer.alloc(0);
    s.on('error', reject);
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        out.push(buf.subarray(2, 2 + buf.readUInt16BE(0)));
        buf = buf.subarray(2 + buf.readUInt16BE(0));
      }
      if (out.length === msgs.length) {
        s.end();
        resolve(out);
      }
    });
    // Both messages in one write, the second split from its length: the server must reassemble.
    const framed = Buffer.concat(msgs.map((m) => Buffer.concat([Buffer.from([m.length >> 8, m.length & 0xff]), m])));
    s.write(framed.subarray(0, framed.length - 3));
    setImmediate(() => s.write(framed.subarray(framed.length - 3)));
  });
}

function rcode(p: DecodedPacket): string {
  return (p as DecodedPacket & { rcode: string }).rcode;
}

describe('DNS proxy over real sockets', () => {
  const upstream = new TestResolver(upstreamAnswer);
  let resolver: DnsResolver;
  let server: DnsServer;
  let port: number;

  before(async () => {
    await upstream.start();
    resolver = new DnsResolver(new DnsForwarder({ servers: [{ host: '127.0.0.1', port: upstream.port }], timeoutMs: 300, attempts: 1 }));
    server = new DnsServer(resolver, '127.0.0.1', 0);
    port = await server.start();
  });

  after(() => {
    server.close();
    upstream.close();
  });

  it('before the first name table: SERVFAIL, for mesh names and others alike', async () => {
    const a = dnsPacket.decode(await overUdp(port, query('outside.test', 'A')));
    assert.equal(rcode(a), 'SERVFAIL');
    assert.equal(upstream.asked.length, 0);
    resolver.update(lookupTable());
  });

  it('UDP: a mesh name is answered from the table, authoritative, with the query id and question', async () => {
    const q = query('reviews', 'A');
    const a = dnsPacket.decode(await overUdp(port, q));
    assert.equal(a.id, dnsPacket.decode(q).id);
    assert.equal(rcode(a), 'NOERROR');
    assert.ok(a.flag_aa && a.flag_qr && a.flag_rd);
    assert.deepEqual(a.questions, [{ name: 'reviews', type: 'A', class: 'IN' }]);
    assert.deepEqual(data(a.answers), ['reviews A 10.96.0.1']);
    const none = dnsPacket.decode(await overUdp(port, query('api.example.com', 'AAAA')));
    assert.equal(rcode(none), 'NOERROR');
    assert.deepEqual(none.answers, []);
  });

  it('UDP: other names go to the upstream resolver, its answer and its NXDOMAIN returned as they are', async () => {
    const a = dnsPacket.decode(await overUdp(port, query('outside.test', 'A')));
    assert.deepEqual(data(a.answers), ['outside.test A 192.0.2.10']);
    assert.ok(!a.flag_aa);
    const nx = dnsPacket.decode(await overUdp(port, query('nowhere.test', 'A')));
    assert.equal(rcode(nx), 'NXDOMAIN');
    assert.deepEqual(upstream.asked.slice(-2), ['udp A outside.test', 'udp A nowhere.test']);
  });

  it('UDP: a truncated upstream answer is asked again over TCP; the client gets it whole with EDNS, truncated without', async () => {
    const whole = dnsPacket.decode(await overUdp(port, query('big.test', 'A', true)));
    assert.equal(whole.answers?.length, 60);
    assert.ok(!whole.flag_tc);
    assert.deepEqual(upstream.asked.slice(-2), ['udp A big.test', 'tcp A big.test']);
    const small = dnsPacket.decode(await overUdp(port, query('big.test', 'A')));
    assert.ok(small.flag_tc, 'a 512-byte client must be told to use TCP');
    assert.deepEqual(small.answers, []);
    assert.deepEqual(small.questions, [{ name: 'big.test', type: 'A', class: 'IN' }]);
  });

  it('TCP: several queries on one connection, mesh and upstream names, answered in full', async () => {
    const [mesh, big] = await overTcp(port, [query('ratings.bar.svc', 'A'), query('big.test', 'A')]).then((r) => r.map((b) => dnsPacket.decode(b)));
    const byName = new Map([mesh!, big!].map((p) => [p.questions![0]!.name, p]));
    assert.deepEqual(data(byName.get('ratings.bar.svc')!.answers), ['ratings.bar.svc A 10.96.0.2']);
    assert.equal(byName.get('big.test')!.answers?.length, 60);
  });

  it('an upstream that never answers gives SERVFAIL', async () => {
    const a = dnsPacket.decode(await overUdp(port, query('silent.test', 'A')));
    assert.equal(rcode(a), 'SERVFAIL');
  });

  it('malformed packets: FORMERR when the header can be read, nothing otherwise; the server keeps answering', async () => {
    const good = query('reviews', 'A');
    const cut = Buffer.from(good.subarray(0, good.length - 3));
    const formerr = dnsPacket.decode(await overUdp(port, cut));
    assert.equal(rcode(formerr), 'FORMERR');
    assert.equal(formerr.id, dnsPacket.decode(good).id);
    // Too short for a header: no answer; a later good query proves the server is alive.
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.send(Buffer.from([1, 2, 3]), port, '127.0.0.1', () => r()));
    s.close();
    const garbage = Buffer.alloc(40, 0xff);
    const [tcpFormerr] = await overTcp(port, [garbage]);
    assert.equal(rcode(dnsPacket.decode(tcpFormerr!)), 'FORMERR');
    assert.deepEqual(data(dnsPacket.decode(await overUdp(port, query('reviews', 'A'))).answers), ['reviews A 10.96.0.1']);
  });
});

test('the DNS proxy does not start on a resolv.conf it cannot use, and says which file and why', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-dns-'));
  const missing = join(dir, 'missing.conf');
  await assert.rejects(new DnsProxy({ namespace: 'foo', domain: 'foo.svc.cluster.local', resolvConfPath: missing, port: 0 }).start(), new RegExp(`DNS proxy: cannot read ${missing}: ENOENT`));
  const bad = join(dir, 'bad.conf');
  writeFileSync(bad, 'nameserver 10.0.0.1\nnameserver resolver.local\n');
  await assert.rejects(new DnsProxy({ namespace: 'foo', domain: 'foo.svc.cluster.local', resolvConfPath: bad, port: 0 }).start(), /bad\.conf: nameserver "resolver\.local": expected an IP address/);
});

test('the DNS proxy answers from the latest name table it was given, with resolv.conf search domains', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-dns-'));
  const conf = join(dir, 'resolv.conf');
  writeFileSync(conf, 'nameserver 127.0.0.1\nsearch foo.svc.cluster.local svc.cluster.local\noptions timeout:1 attempts:1\n');
  const proxy = new DnsProxy({ namespace: 'foo', domain: 'foo.svc.cluster.local', resolvConfPath: conf, port: 0 });
  const port = await proxy.start();
  try {
    assert.equal(proxy.ready, false);
    proxy.update(nameTable());
    assert.equal(proxy.ready, true);
    const a = dnsPacket.decode(await overUdp(port, query('reviews.foo.svc.cluster.local.foo.svc.cluster.local', 'A')));
    assert.deepEqual(data(a.answers), ['reviews.foo.svc.cluster.local.foo.svc.cluster.local CNAME reviews.foo.svc.cluster.local', 'reviews.foo.svc.cluster.local A 10.96.0.1']);
    proxy.update(create(NameTableSchema, { table: { 'reviews.foo.svc.cluster.local': { ips: ['10.96.0.99'], registry: 'Mock', shortname: 'reviews', namespace: 'foo' } } }));
    const b = dnsPacket.decode(await overUdp(port, query('reviews', 'A')));
    assert.deepEqual(data(b.answers), ['reviews A 10.96.0.99']);
  } finally {
    proxy.close();
  }
});
