// Ingress status with two discovery server replicas on one stand-in API server: only the replica
// holding the mesh-leader ConfigMap lock writes status.loadBalancer. The replicas are given different
// ingress Services (192.0.2.10 and 192.0.2.20), so the address in the Ingress's status says which
// replica wrote it. Short lease timings, tests only.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { DEFAULT_INGRESS_SETTINGS } from '../../src/model/ingress/class.js';
import { CONFIG_MAP_RECORD_ANNOTATION } from '../../src/registry/orchestrator/leader-lock.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { discovery, until } from '../status/fixtures.js';
import { endpointSlice, namespace, service, standIn } from './orch-fixtures.js';

const TIMINGS = { leaseDurationMs: 4_000, renewDeadlineMs: 2_000, retryPeriodMs: 100 };
const INGRESS: StoredObject = {
  apiVersion: 'networking.k8s.io/v1',
  kind: 'Ingress',
  metadata: { name: 'shop', namespace: 'shop', creationTimestamp: '2026-01-01T00:00:00Z' },
  spec: { ingressClassName: 'mesh', rules: [{ host: 'shop.example.com', http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'web', port: { number: 80 } } } }] } }] },
};
/** Each replica's ingress Service, and the address it writes. */
const REPLICAS = { 'meshd-a': { service: 'gw-a', ip: '192.0.2.10' }, 'meshd-b': { service: 'gw-b', ip: '192.0.2.20' } } as const;
type Name = keyof typeof REPLICAS;

describe('Ingress status written by the elected replica only', () => {
  let api: FakeApiServer;
  const replicas = new Map<Name, DiscoveryServer>();
  const addresses = () => ((api.get(INGRESS)?.['status'] as { loadBalancer?: { ingress?: Array<{ ip?: string }> } } | undefined)?.loadBalancer?.ingress ?? []).map((i) => i.ip);
  const holder = (): string | undefined => {
    const cm = api.get({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'mesh-leader', namespace: 'mesh-system' } });
    const record = (cm?.metadata['annotations'] as Record<string, string> | undefined)?.[CONFIG_MAP_RECORD_ANNOTATION];
    return record ? (JSON.parse(record) as { holderIdentity: string }).holderIdentity : undefined;
  };
  const ingressWrites = () => api.updates.filter((u) => u.path.endsWith('/ingresses/shop/status') && u.status === 200);

  before(async () => {
    let kubeconfig: string;
    ({ api, kubeconfig } = await standIn(mkdtempSync(join(tmpdir(), 'ingress-leader-'))));
    const objects: StoredObject[] = [
      namespace('shop'),
      namespace('mesh-system'),
      { apiVersion: 'networking.k8s.io/v1', kind: 'IngressClass', metadata: { name: 'mesh' }, spec: { controller: 'mesh.io/ingress-controller' } },
      service('web', 'shop', [{ name: 'http', port: 80 }]),
      endpointSlice('web', 'shop', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.5' }]),
      ...Object.values(REPLICAS).map(({ service: name, ip }) => service(name, 'mesh-system', [{ name: 'http', port: 80 }], { externalIPs: [ip] })),
      INGRESS,
    ];
    objects.forEach((o) => api.put(o));
    for (const [name, { service: ingressService }] of Object.entries(REPLICAS) as Array<[Name, (typeof REPLICAS)[Name]]>) {
      const d = await discovery(kubeconfig, { POD_NAME: name, PILOT_USE_ENDPOINT_SLICE: 'true' }, { registries: ['Orchestrator'], namespace: 'mesh-system', ingress: { ...DEFAULT_INGRESS_SETTINGS, ingressService }, leaderElection: TIMINGS });
      replicas.set(name, d);
    }
  });

  after(async () => {
    await Promise.all([...replicas.values()].map((d) => d.stop()));
    await api.close();
  });

  it("the lock holder writes its address; the other replica's address is never written", async () => {
    await until(() => assert.equal(addresses().length, 1));
    const leader = holder() as Name;
    assert.ok(leader in REPLICAS, `the lock names a replica (${leader})`);
    assert.deepEqual(addresses(), [REPLICAS[leader].ip]);
    // A change both replicas translate (every push re-checks the status): still only the leader's.
    const writes = ingressWrites().length;
    api.put(service('web', 'shop', [{ name: 'http', port: 80 }, { name: 'http-alt', port: 81 }]));
    const other = leader === 'meshd-a' ? 'meshd-b' : 'meshd-a';
    await until(() => assert.equal(replicas.get(other)!.registry.services().find((s) => s.hostname.startsWith('web.'))?.ports.length, 2));
    assert.deepEqual(addresses(), [REPLICAS[leader].ip]);
    assert.ok(ingressWrites().every((u) => JSON.stringify(u.body).includes(REPLICAS[leader].ip)), 'no write carries the other address');
    assert.equal(ingressWrites().length, writes);
  });

  it('when the leader leaves, the other replica takes the lock and writes its own address', async () => {
    const leader = holder() as Name;
    const other = leader === 'meshd-a' ? 'meshd-b' : 'meshd-a';
    await replicas.get(leader)!.stop();
    replicas.delete(leader);
    await until(() => assert.equal(holder(), other));
    await until(() => assert.deepEqual(addresses(), [REPLICAS[other].ip]));
  });
});
