// PILOT_ENABLE_STATUS in a discovery server reading the stand-in orchestrator API: real gRPC ADS
// streams (test/xds harness) decide when to ACK, and the status the API server ends up holding is
// what a user would see with `kubectl get virtualservice -o yaml`.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { TypeUrl } from '../../src/envoy/types.js';
import type { FakeApiServer } from '../config/fake-apiserver.js';
import { standIn } from '../registry/orch-fixtures.js';
import { discovery, dr, reconciled, statusOf, toSubset, until, vs } from './fixtures.js';
import { adsClient, node, sotw, type AdsClient, type SotwStream } from '../xds/harness.js';

/** A proxy on one SotW stream subscribed to clusters; it ACKs only when told. */
class Proxy {
  readonly stream: SotwStream;
  private last: { version: string; nonce: string } | undefined;

  constructor(client: AdsClient, id: string) {
    this.stream = sotw(client);
    this.stream.send({ node: node(id), typeUrl: TypeUrl.Cluster });
  }

  /** Reads the next response without ACKing it. */
  async receive(): Promise<void> {
    const r = await this.stream.next();
    this.last = { version: r.versionInfo, nonce: r.nonce };
  }

  ack(): void {
    this.stream.send({ typeUrl: TypeUrl.Cluster, versionInfo: this.last!.version, responseNonce: this.last!.nonce });
  }

  /** From now on ACKs every response, as Envoy does with config it accepts. */
  ackAll(): void {
    void (async () => {
      for (;;) {
        await this.receive();
        this.ack();
      }
    })().catch(() => undefined);
  }
}

describe('status written through the orchestrator API (PILOT_ENABLE_STATUS)', () => {
  let api: FakeApiServer;
  let kubeconfig: string;
  let d: DiscoveryServer;
  const clients: AdsClient[] = [];
  const client = () => {
    const c = adsClient(d.addresses['grpc']!);
    clients.push(c);
    return c;
  };

  before(async () => {
    ({ api, kubeconfig } = await standIn(mkdtempSync(join(tmpdir(), 'status-api-'))));
    api.put(toSubset('v2'));
    d = await discovery(kubeconfig, { PILOT_ENABLE_STATUS: 'true', PILOT_ENABLE_ANALYSIS: 'true' });
  });

  after(async () => {
    for (const c of clients) c.close();
    await d.stop();
    await api.close();
  });

  it('writes the analysis messages into status.validationMessages, only through /status, and clears them when the problem goes away', async () => {
    const messages = await until(() => {
      const m = statusOf(api).validationMessages;
      assert.ok(m && m.length > 0, 'messages written');
      return m;
    });
    assert.deepEqual(messages, [
      {
        type: { code: 'MSH0101', name: 'ReferencedResourceNotFound' },
        level: 'ERROR',
        description: 'subset "v2" of host reviews.default.svc.cluster.local is not defined by any DestinationRule',
        path: 'spec.http[0].route[0].destination.subset',
      },
    ]);
    assert.ok(api.updates.length > 0 && api.updates.every((u) => u.path.endsWith('/status')), 'every write goes to the status subresource');
    assert.equal(api.get(vs({}))!.metadata['generation'], 1, 'a status write leaves the generation alone');
    api.put(dr);
    await until(() => assert.equal(statusOf(api).validationMessages, undefined));
  });

  it('sets Reconciled as proxies ACK, flips it when a proxy that has not ACKed connects, and stops counting a proxy that leaves', async () => {
    const first = new Proxy(client(), 'sidecar~10.0.0.1~a.default~default.svc.cluster.local');
    await first.receive();
    await until(() => assert.deepEqual([reconciled(api)?.status, reconciled(api)?.message], ['False', '0/1 proxies up to date.']));
    first.ack();
    await until(() => assert.deepEqual([reconciled(api)?.status, reconciled(api)?.message], ['True', '1/1 proxies up to date.']));
    assert.equal(statusOf(api).observedGeneration, 1);

    const second = new Proxy(client(), 'sidecar~10.0.0.2~b.default~default.svc.cluster.local');
    await second.receive();
    await until(() => assert.deepEqual([reconciled(api)?.status, reconciled(api)?.message], ['False', '1/2 proxies up to date.']));
    second.stream.close();
    await until(() => assert.deepEqual([reconciled(api)?.status, reconciled(api)?.message], ['True', '1/1 proxies up to date.']));
    first.stream.close();
  });

  it('reports a new generation with its observedGeneration', async () => {
    const proxy = new Proxy(client(), 'sidecar~10.0.0.3~c.default~default.svc.cluster.local');
    proxy.ackAll();
    await until(() => assert.deepEqual([reconciled(api)?.status, statusOf(api).observedGeneration], ['True', 1]));
    api.put(toSubset('v1'));
    await until(() => assert.deepEqual([reconciled(api)?.status, reconciled(api)?.message, statusOf(api).observedGeneration], ['True', '1/1 proxies up to date.', 2]));
  });

  it('retries an update that meets a concurrent change (409 Conflict) with the object read again', async () => {
    const before = api.updates.length;
    const path = '/virtualservices/reviews/status';
    api.interleave(() => api.put(vs(api.get(vs({}))!.spec as Record<string, unknown>, { team: 'reviews' })), path);
    api.put({ ...dr, spec: { host: 'reviews', subsets: [{ name: 'v2', labels: { version: 'v2' } }] } });
    await until(() => assert.ok(statusOf(api).validationMessages?.length, 'the subset v1 is gone again'));
    const codes = api.updates.slice(before).filter((u) => u.path.endsWith(path)).map((u) => u.status);
    assert.deepEqual(codes.slice(0, 2), [409, 200], 'the conflict, then the retry');
    assert.deepEqual(api.get(vs({}))!.metadata['labels'], { team: 'reviews' }, 'the concurrent change is kept');
  });
});

describe('without PILOT_ENABLE_STATUS', () => {
  it('writes no status, though analysis runs and proxies ACK', async () => {
    const { api, kubeconfig } = await standIn(mkdtempSync(join(tmpdir(), 'status-off-')));
    api.put(toSubset('v2'));
    const d = await discovery(kubeconfig, { PILOT_ENABLE_ANALYSIS: 'true' });
    const c = adsClient(d.addresses['grpc']!);
    try {
      const proxy = new Proxy(c, 'sidecar~10.0.0.9~z.default~default.svc.cluster.local');
      await proxy.receive();
      proxy.ack();
      await until(() => assert.equal(d.analysis?.current().messages.length, 1));
      // A later request on the same stream is answered only after the ACK was processed.
      proxy.stream.send({ typeUrl: TypeUrl.Listener });
      await proxy.receive();
      assert.deepEqual(api.updates, []);
      assert.equal(api.requests.filter((r) => r.path.endsWith('/status')).length, 0);
      assert.deepEqual(statusOf(api), {});
    } finally {
      c.close();
      await d.stop();
      await api.close();
    }
  });
});
