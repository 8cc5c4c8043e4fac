import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { counter } from '../../src/common/metrics.js';
import { selfSignedCertificate } from '../../src/webhooks/selfsigned.js';
import { parseAddress, WebhookServer } from '../../src/webhooks/server.js';
import { installValidation } from '../../src/webhooks/validation.js';

interface Reply {
  status: number;
  body: string;
}

function post(server: WebhookServer, body: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }, path = '/validate', servername = 'meshd.mesh-system.svc'): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: server.port(), path, method: 'POST', headers, ca: server.certificatePem(), servername },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function admission(object: unknown, uid = 'uid-1', operation = 'CREATE'): string {
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid, operation, namespace: 'foo', resource: { group: 'security.mesh.io', version: 'v1beta1', resource: 'authorizationpolicies' }, object },
  });
}

const GOOD = { apiVersion: 'security.mesh.io/v1beta1', kind: 'AuthorizationPolicy', metadata: { name: 'ok' }, spec: { action: 'ALLOW', rules: [{ when: [{ key: 'request.auth.claims[groups]', values: ['g'] }] }] } };
const BAD = {
  apiVersion: 'security.mesh.io/v1beta1',
  kind: 'AuthorizationPolicy',
  metadata: { name: 'deny-all' },
  spec: { action: 'CUSTOM', rules: [{ from: [{ source: { ipBlocks: ['nope'] } }], when: [{ key: 'request.auth.claim[groups]', values: ['g'] }] }] },
};

async function metricTotal(name: 'validator_validation_passed' | 'validator_validation_failed' | 'validator_validation_http_error'): Promise<number> {
  return (await counter(name).get()).values.reduce((sum, v) => sum + v.value, 0);
}

describe('validation webhook over TLS (self-signed)', () => {
  const server = new WebhookServer({ httpsAddr: '127.0.0.1:0', customHost: 'validator.example' });

  before(async () => {
    installValidation(server, { enabled: true, maxBodyBytes: 64 * 1024 });
    await server.start();
  });
  after(() => server.close());

  it('allows a valid resource and echoes the uid', async () => {
    const passed = await metricTotal('validator_validation_passed');
    const reply = await post(server, admission(GOOD, 'abc-123'));
    assert.equal(reply.status, 200);
    assert.deepEqual(JSON.parse(reply.body), { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: 'abc-123', allowed: true } });
    assert.equal(await metricTotal('validator_validation_passed'), passed + 1);
  });

  it('denies an invalid resource with every error in the message', async () => {
    const failed = await metricTotal('validator_validation_failed');
    const reply = await post(server, admission(BAD, 'u-2'));
    const response = (JSON.parse(reply.body) as { response: { uid: string; allowed: boolean; status: { message: string } } }).response;
    assert.equal(response.uid, 'u-2');
    assert.equal(response.allowed, false);
    assert.deepEqual(response.status.message.split('\n'), [
      'AuthorizationPolicy/foo/deny-all: spec.provider: required when action is CUSTOM',
      'AuthorizationPolicy/foo/deny-all: spec.rules[0].from[0].source.ipBlocks[0]: invalid IP address or CIDR "nope"; expected e.g. 10.1.2.3 or 10.0.0.0/8',
      'AuthorizationPolicy/foo/deny-all: spec.rules[0].when[0].key: unknown key "request.auth.claim[groups]"; expected one of request.auth.claims[<name>], request.headers[<name>], request.auth.principal, request.auth.audiences, request.auth.presenter, source.ip, remote.ip, source.namespace, source.principal, destination.ip, destination.port, connection.sni',
    ]);
    assert.equal(await metricTotal('validator_validation_failed'), failed + 1);
  });

  it('allows deletions without judging them', async () => {
    const reply = await post(server, admission(null, 'u-3', 'DELETE'));
    assert.equal((JSON.parse(reply.body) as { response: { allowed: boolean } }).response.allowed, true);
  });

  const refusals: [string, string | Buffer, Record<string, string>, RegExp][] = [
    ['malformed JSON', '{"kind": ', { 'content-type': 'application/json' }, /^malformed JSON/],
    ['a wrong content-type', admission(GOOD), { 'content-type': 'text/plain' }, /invalid content-type "text\/plain"; expected application\/json/],
    ['an oversized body', Buffer.alloc(128 * 1024, 0x20), { 'content-type': 'application/json' }, /request body larger than 65536 bytes/],
    ['JSON that is not an AdmissionReview', '{"kind":"Pod"}', { 'content-type': 'application/json' }, /expected an AdmissionReview/],
    ['a review without uid', JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: {} }), { 'content-type': 'application/json' }, /no request\.uid/],
    ['a v1beta1 review', JSON.stringify({ apiVersion: 'admission.k8s.io/v1beta1', kind: 'AdmissionReview', request: { uid: 'x' } }), { 'content-type': 'application/json' }, /expected admission\.k8s\.io\/v1/],
  ];
  for (const [name, body, headers, reason] of refusals) {
    it(`answers 400 with a reason to ${name}, and keeps serving`, async () => {
      const errors = await metricTotal('validator_validation_http_error');
      const reply = await post(server, body, headers);
      assert.equal(reply.status, 400);
      assert.match(reply.body, reason);
      assert.equal(await metricTotal('validator_validation_http_error'), errors + 1);
      assert.equal((await post(server, admission(GOOD))).status, 200);
    });
  }

  it('serves a certificate valid for MESHD_CUSTOM_HOST too', async () => {
    assert.equal((await post(server, admission(GOOD), undefined, '/validate', 'validator.example')).status, 200);
  });

  it('answers 404 on other paths', async () => {
    assert.equal((await post(server, '{}', undefined, '/nope')).status, 404);
  });
});

describe('validation webhook configuration', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'webhook-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('serves the certificate from --tlsCertFile/--tlsKeyFile', async () => {
    const { certPem, keyPem } = await selfSignedCertificate(['files.example']);
    await writeFile(join(dir, 'cert.pem'), certPem);
    await writeFile(join(dir, 'key.pem'), keyPem);
    const server = new WebhookServer({ httpsAddr: '127.0.0.1:0', tlsCertFile: join(dir, 'cert.pem'), tlsKeyFile: join(dir, 'key.pem') });
    installValidation(server, { enabled: true });
    await server.start();
    try {
      assert.equal(server.certificatePem(), certPem);
      assert.equal((await post(server, admission(GOOD), undefined, '/validate', 'files.example')).status, 200);
    } finally {
      await server.close();
    }
  });

  it('VALIDATION_ENABLED=false leaves /validate unserved', async () => {
    const server = new WebhookServer({ httpsAddr: '127.0.0.1:0' });
    assert.equal(installValidation(server, { enabled: false }), false);
    await server.start();
    try {
      assert.equal((await post(server, admission(GOOD))).status, 404);
    } finally {
      await server.close();
    }
  });

  it('rejects a lone --tlsCertFile and a bad --httpsAddr with messages naming the flag', async () => {
    await assert.rejects(new WebhookServer({ httpsAddr: '127.0.0.1:0', tlsCertFile: 'x' }).start(), /--tlsCertFile and --tlsKeyFile must be given together/);
    assert.throws(() => parseAddress('15017'), /--httpsAddr "15017": expected \[host\]:port/);
    assert.deepEqual(parseAddress(':15017'), { host: undefined, port: 15017 });
    assert.deepEqual(parseAddress('[::1]:0'), { host: '::1', port: 0 });
  });
});
