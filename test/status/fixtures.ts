// Fixtures of the status tests: the mesh resources whose status is checked, what the stand-in API
// server holds of it, and a discovery server reading that API server.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiscoveryServer, type DiscoveryOptions } from '../../src/cli/discovery-server.js';
import { loadSettings } from '../../src/common/env.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { eventually } from '../helpers/proc.js';
import { localDiscoveryOptions } from '../security/fixtures.js';

export const vs = (spec: Record<string, unknown>, labels?: Record<string, string>): StoredObject => ({
  apiVersion: 'networking.mesh.io/v1',
  kind: 'VirtualService',
  metadata: { name: 'reviews', namespace: 'default', ...(labels ? { labels } : {}) },
  spec,
});
export const toSubset = (subset: string) => vs({ hosts: ['reviews'], http: [{ route: [{ destination: { host: 'reviews', subset } }] }] });
export const dr: StoredObject = {
  apiVersion: 'networking.mesh.io/v1',
  kind: 'DestinationRule',
  metadata: { name: 'reviews', namespace: 'default' },
  spec: { host: 'reviews', subsets: [{ name: 'v1', labels: { version: 'v1' } }, { name: 'v2', labels: { version: 'v2' } }] },
};

export interface Status {
  observedGeneration?: number;
  conditions?: Array<{ type: string; status: string; message: string; lastTransitionTime: string }>;
  validationMessages?: Array<{ type: { code: string; name: string }; level: string; description: string; path: string }>;
}

export const statusOf = (api: FakeApiServer, object: StoredObject = vs({})): Status => (api.get(object)?.status ?? {}) as Status;
/** Bounded waits, generous for a loaded machine. */
export const until = <T>(check: () => T | Promise<T>) => eventually(check, 15_000);
export const reconciled = (api: FakeApiServer) => statusOf(api).conditions?.find((c) => c.type === 'Reconciled');

/** A discovery server on the stand-in API server, with `env` as its settings and `options` added to its flags. */
export async function discovery(kubeconfig: string, env: Record<string, string>, options: Partial<DiscoveryOptions> = {}): Promise<DiscoveryServer> {
  const dir = mkdtempSync(join(tmpdir(), 'status-'));
  // Settings are read once per load: these apply to this server only.
  loadSettings('discovery', { ...process.env, ...env });
  try {
    const d = new DiscoveryServer({ ...localDiscoveryOptions(dir), configDir: undefined, orchestrator: { kubeconfig, backoff: { initialMs: 10, maxMs: 50 } }, ...options });
    await d.start();
    return d;
  } finally {
    loadSettings('discovery');
  }
}
