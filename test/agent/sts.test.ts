// The agent's STS server (--stsPort) on a real socket, exchanging at a real OAuth 2.0 token endpoint
// on loopback: RFC 8693 requests, RFC 6749 errors, retries on 5xx, the endpoint's verdict passed on.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { counter, type CounterName } from '../../src/common/metrics.js';
import { StsServer } from '../../src/agent/sts/sts-server.js';
import { CloudTokenExchange, TOKEN_EXCHANGE_GRANT } from '../../src/agent/sts/token-exchange.js';
import { metricValue } from '../helpers/metrics.js';

const JWT_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

async function tokenEndpoint(): Promise<{ url: string; seen: URLSearchParams[]; failNext: { count: number }; close(): void }> {
  const seen: URLSearchParams[] = [];
  const failNext = { count: 0 };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const form = new URLSearchParams(body);
      seen.push(form);
      if (failNext.count > 0) {
        failNext.count--;
        res.writeHead(503).end('busy');
      } else if (form.get('subject_token') !== 'good-workload-jwt') {
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'invalid_grant', error_description: 'subject token rejected' }));
      } else {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ access_token: `federated-for-${form.get('audience')}`, issued_token_type: 'urn:ietf:params:oauth:token-type:access_token', token_type: 'Bearer', expires_in: 3600 }));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/token`, seen, failNext, close: () => server.close() };
}

/** A token endpoint and an STS server exchanging at it, both closed when the test ends. */
async function stsFixture(t: TestContext, retries?: number): Promise<{ ep: Awaited<ReturnType<typeof tokenEndpoint>>; port: number }> {
  const ep = await tokenEndpoint();
  const sts = new StsServer(new CloudTokenExchange({ endpoint: ep.url, ...(retries === undefined ? {} : { retries }) }));
  const port = await sts.start(0);
  t.after(async () => {
    await sts.close();
    ep.close();
  });
  return { ep, port };
}

function post(port: number, form: Record<string, string>, contentType = 'application/x-www-form-urlencoded'): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/token`, { method: 'POST', headers: { 'content-type': contentType }, body: new URLSearchParams(form).toString() });
}

const GOOD = { grant_type: TOKEN_EXCHANGE_GRANT, subject_token: 'good-workload-jwt', subject_token_type: JWT_TYPE, audience: 'telemetry', scope: 'cloud-platform' };

function metric(name: CounterName): Promise<number> {
  return metricValue(counter(name), { request_type: 'token_exchange' });
}

test('a valid exchange returns the endpoint’s token; the workload token, audience and scope reach the endpoint', async (t) => {
  const { ep, port } = await stsFixture(t);
  const before = await metric('num_outgoing_requests');
  const res = await post(port, GOOD);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('cache-control'), 'no-store');
  assert.deepEqual(await res.json(), { access_token: 'federated-for-telemetry', issued_token_type: 'urn:ietf:params:oauth:token-type:access_token', token_type: 'Bearer', expires_in: 3600 });
  const sent = ep.seen.at(-1)!;
  assert.equal(sent.get('grant_type'), TOKEN_EXCHANGE_GRANT);
  assert.equal(sent.get('subject_token'), 'good-workload-jwt');
  assert.equal(sent.get('subject_token_type'), JWT_TYPE);
  assert.equal(sent.get('scope'), 'cloud-platform');
  assert.equal(await metric('num_outgoing_requests'), before + 1);
  assert.ok((await metric('outgoing_latency')) > 0);
});

test('a busy endpoint is retried; a rejected token is passed on as 400 with the endpoint’s error', async (t) => {
  const { ep, port } = await stsFixture(t, 2);
  const retries = await metric('num_outgoing_retries');
  ep.failNext.count = 1;
  assert.equal((await post(port, GOOD)).status, 200);
  assert.equal(await metric('num_outgoing_retries'), retries + 1);

  const failed = await metric('num_failed_outgoing_requests');
  const bad = await post(port, { ...GOOD, subject_token: 'stolen' });
  assert.equal(bad.status, 400);
  assert.deepEqual(await bad.json(), { error: 'invalid_grant', error_description: 'subject token rejected' });
  assert.equal(await metric('num_failed_outgoing_requests'), failed + 1);

  ep.failNext.count = 3;
  const down = await post(port, GOOD);
  assert.equal(down.status, 500);
  assert.equal(((await down.json()) as { error: string }).error, 'server_error');
});

test('malformed requests are refused as RFC 6749/8693 say, without reaching the endpoint', async (t) => {
  const { ep, port } = await stsFixture(t);
  const cases: Array<[Record<string, string>, string, RegExp, string?]> = [
    [{ ...GOOD, grant_type: 'client_credentials' }, 'unsupported_grant_type', /client_credentials is not supported/],
    [{ subject_token: 'x', subject_token_type: JWT_TYPE }, 'invalid_request', /grant_type is missing/],
    [{ grant_type: TOKEN_EXCHANGE_GRANT, subject_token_type: JWT_TYPE }, 'invalid_request', /subject_token is missing/],
    [{ grant_type: TOKEN_EXCHANGE_GRANT, subject_token: 'x' }, 'invalid_request', /subject_token_type is missing/],
    [{ ...GOOD, subject_token_type: 'urn:x:saml' }, 'invalid_request', /urn:x:saml is not supported/],
    [{ ...GOOD, actor_token: 'a', actor_token_type: JWT_TYPE }, 'invalid_request', /actor_token/],
    [GOOD, 'invalid_request', /application\/x-www-form-urlencoded/, 'application/json'],
  ];
  for (const [form, error, description, contentType] of cases) {
    const res = await post(port, form, contentType);
    assert.equal(res.status, 400, JSON.stringify(form));
    const body = (await res.json()) as { error: string; error_description: string };
    assert.equal(body.error, error);
    assert.match(body.error_description, description);
  }
  const get = await fetch(`http://127.0.0.1:${port}/token`);
  assert.equal(get.status, 405);
  assert.equal(ep.seen.length, 0);
});
