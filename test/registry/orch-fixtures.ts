// Orchestrator objects as the API server stores them (Services, EndpointSlices, Endpoints, Pods,
// Nodes, Namespaces), and a stand-in API server with a kubeconfig file pointing at it.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pluralOf } from '../../src/api/crds.js';
import { isKind } from '../../src/api/types.js';
import { FakeApiServer, type StoredObject } from '../config/fake-apiserver.js';

export interface PortSpec {
  name?: string;
  port: number;
  targetPort?: number | string;
  protocol?: string;
  appProtocol?: string;
}

export function service(name: string, namespace: string, ports: PortSpec[], spec: Record<string, unknown> = {}): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace, labels: { app: name } },
    spec: { clusterIP: '10.96.0.10', type: 'ClusterIP', selector: { app: name }, ports: ports.map((p) => ({ protocol: 'TCP', ...p })), ...spec },
  };
}

export function pod(name: string, namespace: string, ip: string, labels: Record<string, string>, extra: { serviceAccount?: string; nodeName?: string } = {}): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, labels },
    spec: { serviceAccountName: extra.serviceAccount ?? 'default', nodeName: extra.nodeName ?? 'node-1', containers: [{ name: 'app', image: 'app:1' }] },
    status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
  };
}

export function node(name: string, region: string, zone: string): StoredObject {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'topology.kubernetes.io/region': region, 'topology.kubernetes.io/zone': zone } } };
}

export function namespace(name: string, labels: Record<string, string> = {}): StoredObject {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } };
}

export interface Address {
  ip: string;
  /** The Pod it names (targetRef); absent: no targetRef. */
  pod?: string;
  ready?: boolean;
}

export function endpointSlice(serviceName: string, namespace: string, ports: { name?: string; port: number }[], addresses: Address[], suffix = 'abc'): StoredObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${serviceName}-${suffix}`, namespace, labels: { 'kubernetes.io/service-name': serviceName } },
    addressType: 'IPv4',
    ports: ports.map((p) => ({ protocol: 'TCP', ...p })),
    endpoints: addresses.map((a) => ({
      addresses: [a.ip],
      conditions: { ready: a.ready ?? true },
      ...(a.pod ? { targetRef: { kind: 'Pod', name: a.pod, namespace } } : {}),
    })),
  };
}

export function endpoints(serviceName: string, namespace: string, ports: { name?: string; port: number }[], addresses: Address[]): StoredObject {
  const address = (a: Address) => ({ ip: a.ip, ...(a.pod ? { targetRef: { kind: 'Pod', name: a.pod, namespace } } : {}) });
  return {
    apiVersion: 'v1',
    kind: 'Endpoints',
    metadata: { name: serviceName, namespace },
    subsets: [
      {
        addresses: addresses.filter((a) => a.ready !== false).map(address),
        notReadyAddresses: addresses.filter((a) => a.ready === false).map(address),
        ports: ports.map((p) => ({ protocol: 'TCP', ...p })),
      },
    ],
  };
}

/** A webhook configuration as an operator applies it (caBundle absent or as given). */
export function webhookConfiguration(kind: 'MutatingWebhookConfiguration' | 'ValidatingWebhookConfiguration', name: string, webhooks: string[], caBundle?: string): StoredObject {
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind,
    metadata: { name },
    webhooks: webhooks.map((w) => ({ name: w, clientConfig: { service: { name: 'meshd', namespace: 'mesh-system', path: '/inject' }, ...(caBundle !== undefined ? { caBundle } : {}) } })),
  };
}

/** A started stand-in API server and a kubeconfig file for it in `dir`. */
export async function standIn(dir: string): Promise<{ api: FakeApiServer; kubeconfig: string }> {
  const api = new FakeApiServer((kind) => (isKind(kind) ? pluralOf(kind) : `${kind.toLowerCase()}s`));
  await api.start();
  const kubeconfig = join(dir, `kubeconfig-${Math.random().toString(36).slice(2)}`);
  await writeFile(kubeconfig, api.kubeconfig());
  return { api, kubeconfig };
}
