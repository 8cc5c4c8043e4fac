// x-forwarded-client-cert on real mutual-TLS connections (node:https on loopback, certificates of a
// mesh CA): the value pinned byte for byte (By, Hash of the client's DER, Cert, Chain, Subject,
// URI, DNS in Envoy's order), the same on every request of a keep-alive connection whatever the
// client sent, and each connection's own client in it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, X509Certificate } from 'node:crypto';
import { Agent, createServer, request } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { create } from '@bufbuild/protobuf';
import {
  HttpConnectionManager_ForwardClientCertDetails as Forward,
  HttpConnectionManagerSchema,
} from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RequestHeaders } from '../../src/envoy/request.js';
import { peerCertOf } from '../../src/dataplane/tls/context.js';
import { rememberPeer } from '../../src/dataplane/tls/peer.js';
import { compileXfcc } from '../../src/dataplane/tls/xfcc.js';
import { meshCa, spiffe } from './tls-fixtures.js';

const XFCC = 'x-forwarded-client-cert';

/** A TLS server requiring client certificates whose responses carry the XFCC the proxy would forward. */
async function xfccServer(t: { after(fn: () => unknown): void }, mode: Forward, key: string, cert: string, ca: string): Promise<number> {
  const hcm = create(HttpConnectionManagerSchema, { forwardClientCertDetails: mode, setCurrentClientCertDetails: { cert: true, chain: true, subject: true, uri: true, dns: true } });
  const xfcc = compileXfcc(hcm);
  const server = createServer({ key, cert, ca, requestCert: true, rejectUnauthorized: true }, (req, res) => {
    const headers = new RequestHeaders(Object.entries(req.headers));
    xfcc(headers, req.socket);
    res.end(headers.joined(XFCC) ?? '(none)');
  });
  server.on('secureConnection', (s: TLSSocket) => rememberPeer(s, peerCertOf(s.getPeerX509Certificate()!)));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  return (server.address() as AddressInfo).port;
}

function get(port: number, agent: Agent, headers: Record<string, string>): Promise<{ body: string; socket: TLSSocket }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', agent, headers, servername: 'server.default' }, (res) => {
      const socket = res.socket as TLSSocket;
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ body, socket }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('XFCC of an mTLS connection: every detail pinned, the same on each request of the connection, per connection its own client', async (t) => {
  const ca = await meshCa();
  const server = await ca.issue(spiffe('server'), ['server.default']);
  const alice = await ca.issue(spiffe('alice'), ['alice.example', 'a.example']);
  const bob = await ca.issue(spiffe('bob', 'other'));
  const port = await xfccServer(t, Forward.APPEND_FORWARD, server.keyPem, server.chainPem, ca.rootPem);

  /** The value Envoy's format gives for a client certificate (written out here, not by the code under test). */
  const expected = (chainPem: string, uri: string, dns: readonly string[]): string => {
    const leaf = new X509Certificate(chainPem);
    const root = new X509Certificate(ca.rootPem);
    return [
      `By=${spiffe('server')}`,
      `Hash=${createHash('sha256').update(leaf.raw).digest('hex')}`,
      `Cert="${encodeURIComponent(leaf.toString())}"`,
      `Chain="${encodeURIComponent(leaf.toString() + root.toString())}"`,
      'Subject=""',
      `URI=${uri}`,
      ...dns.map((d) => `DNS=${d}`),
    ].join(';');
  };

  const aliceAgent = new Agent({ keepAlive: true, maxSockets: 1, key: alice.keyPem, cert: alice.chainPem, ca: ca.rootPem });
  const bobAgent = new Agent({ keepAlive: true, maxSockets: 1, key: bob.keyPem, cert: bob.chainPem, ca: ca.rootPem });
  t.after(() => {
    aliceAgent.destroy();
    bobAgent.destroy();
  });
  const aliceValue = expected(alice.chainPem, spiffe('alice'), ['alice.example', 'a.example']);
  const bobValue = expected(bob.chainPem, spiffe('bob', 'other'), []);
  assert.match(aliceValue, /^By=spiffe:\/\/cluster\.local\/ns\/default\/sa\/server;Hash=[0-9a-f]{64};Cert="-----BEGIN%20CERTIFICATE-----%0A.+-----END%20CERTIFICATE-----%0A";Chain=".+";Subject="";URI=spiffe:\/\/cluster\.local\/ns\/default\/sa\/alice;DNS=alice\.example;DNS=a\.example$/);

  // Three requests on one keep-alive connection, each with its own prior value.
  const first = await get(port, aliceAgent, {});
  assert.equal(first.body, aliceValue);
  const second = await get(port, aliceAgent, { [XFCC]: 'By=spoofed' });
  assert.equal(second.socket, first.socket, 'the same connection');
  assert.equal(second.body, `By=spoofed,${aliceValue}`);
  const third = await get(port, aliceAgent, { [XFCC]: 'By=other' });
  assert.equal(third.socket, first.socket);
  assert.equal(third.body, `By=other,${aliceValue}`);

  // Another client on its own connection, interleaved with the first one's.
  const fromBob = await get(port, bobAgent, { [XFCC]: 'By=spoofed' });
  assert.notEqual(fromBob.socket.localPort, first.socket.localPort);
  assert.equal(fromBob.body, `By=spoofed,${bobValue}`);
  assert.equal((await get(port, aliceAgent, {})).body, aliceValue);
  assert.equal((await get(port, bobAgent, {})).body, bobValue);
});

test('XFCC modes on an mTLS connection: SANITIZE_SET replaces, SANITIZE removes, FORWARD_ONLY passes the client value on', async (t) => {
  const ca = await meshCa();
  const server = await ca.issue(spiffe('server'), ['server.default']);
  const client = await ca.issue(spiffe('client'));
  const agent = new Agent({ keepAlive: true, maxSockets: 1, key: client.keyPem, cert: client.chainPem, ca: ca.rootPem });
  t.after(() => agent.destroy());
  const sanitizeSet = await xfccServer(t, Forward.SANITIZE_SET, server.keyPem, server.chainPem, ca.rootPem);
  const sanitize = await xfccServer(t, Forward.SANITIZE, server.keyPem, server.chainPem, ca.rootPem);
  const forwardOnly = await xfccServer(t, Forward.FORWARD_ONLY, server.keyPem, server.chainPem, ca.rootPem);
  for (let i = 0; i < 2; i++) {
    const set = (await get(sanitizeSet, agent, { [XFCC]: 'By=spoofed' })).body;
    assert.match(set, /^By=spiffe:\/\/cluster\.local\/ns\/default\/sa\/server;Hash=[0-9a-f]{64};Cert=".+";Chain=".+";Subject="";URI=spiffe:\/\/cluster\.local\/ns\/default\/sa\/client$/);
    assert.equal((await get(sanitize, agent, { [XFCC]: 'By=spoofed' })).body, '(none)');
    assert.equal((await get(forwardOnly, agent, { [XFCC]: 'By=spoofed' })).body, 'By=spoofed');
  }
});
