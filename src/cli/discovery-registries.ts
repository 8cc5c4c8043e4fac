// The discovery server's service registries from --registries: ServiceEntry (always), Mock, and the
// orchestrator's when there is one to read (with it, the Ingress translation unless the mesh
// config's ingressControllerMode is OFF, as in the Go mesh); and the proxies' model view, whose
// claims the orchestrator's Pods replace.
import type { OrchestratorSourceOptions } from '../config/orchestrator.js';
import type { ConfigSource } from '../config/store.js';
import type { MemoryStore } from '../config/memory.js';
import { scope } from '../common/log.js';
import { podNameOf, withWorkload } from '../model/proxy.js';
import { AggregateRegistry } from '../registry/aggregate.js';
import { MockRegistry } from '../registry/mock.js';
import { OrchestratorRegistry } from '../registry/orchestrator/controller.js';
import { IngressController } from '../registry/orchestrator/ingress.js';
import { DEFAULT_INGRESS_SETTINGS, type IngressSettings } from '../model/ingress/class.js';
import { ROOT_NAMESPACE } from '../api/types.js';
import { ServiceEntryRegistry } from '../registry/serviceentry.js';
import type { ServiceRegistry } from '../registry/types.js';
import type { WorkloadHealth } from '../registry/workload-health.js';
import { ProxyModels } from '../xds/generators/index.js';
import type { DiscoverySettings } from './discovery-settings.js';

const log = scope('default');

export interface RegistryOptions {
  readonly registries: readonly string[];
  readonly clusterId: string;
  readonly domain: string;
  readonly orchestrator: OrchestratorSourceOptions;
  /** False in the local mode (--configDir without --orchconfig): no orchestrator to read. */
  readonly hasOrchestrator: boolean;
  /** --namespace: the generated Gateways go there unless ORCH_INGRESS_NS says otherwise. */
  readonly namespace?: string;
  /** The mesh config's Ingress fields; default the mesh's defaults. */
  readonly ingress?: IngressSettings;
}

export interface DiscoveryRegistries {
  readonly registry: AggregateRegistry;
  readonly mock: MockRegistry | undefined;
  readonly orchestrator: OrchestratorRegistry | undefined;
  /** The orchestrator's Ingresses, with the orchestrator registry and ingressControllerMode other than OFF. */
  readonly ingress: IngressController | undefined;
  readonly proxies: ProxyModels;
}

/** The registries read WorkloadEntries through `health`'s views: an unhealthy entry is no endpoint. */
export function discoveryRegistries(opts: RegistryOptions, settings: DiscoverySettings, store: ConfigSource, autoEntries: MemoryStore, health: WorkloadHealth): DiscoveryRegistries {
  const entrySources = [health.view(store), health.view(autoEntries)] as const;
  const serviceEntries = new ServiceEntryRegistry(entrySources[0], opts.clusterId, entrySources[1]);
  const registries: ServiceRegistry[] = [serviceEntries];
  const mock = opts.registries.includes('Mock') ? new MockRegistry(opts.clusterId) : undefined;
  if (mock) registries.push(mock);
  let orchestrator: OrchestratorRegistry | undefined;
  let ingress: IngressController | undefined;
  if (opts.registries.includes('Orchestrator')) {
    if (!opts.hasOrchestrator) {
      log.info('--registries Orchestrator: no orchestrator with --configDir and no --orchconfig; services come from ServiceEntry and WorkloadEntry');
    } else {
      orchestrator = new OrchestratorRegistry({ ...opts.orchestrator, ...settings.orchestratorRegistry, workloadEntrySources: entrySources, domain: opts.domain, clusterId: opts.clusterId });
      registries.push(orchestrator);
      if (settings.serviceEntrySelectsPods) serviceEntries.selectPods(orchestrator);
      const ingressSettings = opts.ingress ?? DEFAULT_INGRESS_SETTINGS;
      if (ingressSettings.mode !== 'OFF') {
        const services = orchestrator;
        const { qps, burst, workers } = settings.status;
        ingress = new IngressController({
          ...opts.orchestrator,
          domain: opts.domain,
          settings: ingressSettings,
          // As the Go mesh's K8S_INGRESS_NS defaults to its own namespace.
          ingressNamespace: settings.ingressNamespace || opts.namespace || ROOT_NAMESPACE,
          serviceObject: (namespace, name) => services.serviceObject(namespace, name),
          status: { qps, burst, workers },
        });
      }
    }
  }
  const pods = orchestrator;
  const proxies = new ProxyModels(
    pods
      ? (proxy) => {
          const pod = pods.podFor(proxy.id, podNameOf(proxy), proxy.namespace, proxy.ipAddresses);
          return pod ? withWorkload(proxy, pod) : proxy;
        }
      : undefined,
  );
  return { registry: new AggregateRegistry(registries, opts.clusterId), mock, orchestrator, ingress, proxies };
}
