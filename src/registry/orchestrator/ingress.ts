// The orchestrator's Ingress resources (networking.k8s.io/v1 Ingress and IngressClass) read through
// the shared informers, as the Go mesh's ingress controller reads them when its orchestrator
// registry is on; ../../model/ingress/ translates them at every push into the Gateways and
// VirtualServices the push context sees next to the config store's; the Ingresses served get the
// ingress Service's addresses in status.loadBalancer.ingress, as the Go mesh writes them.
import { scope } from '../../common/log.js';
import { cachingHandlers, collectionPath, InformerGroup, OrchestratorClient, type InformerGroupOptions, type ResourceType } from '../../config/informer.js';
import type { Kind, ResourceOf } from '../../api/types.js';
import type { IngressSettings, OrchIngress, OrchIngressClass } from '../../model/ingress/class.js';
import { servicePortsOf, translateIngresses, type IngressTranslation } from '../../model/ingress/translate.js';
import type { ConfigView } from '../../model/push-context.js';
import type { Service } from '../../model/service.js';
import { ingressStatus, loadBalancerIngress, serviceAddresses, type IngressServiceObject, type LoadBalancerIngress } from '../../model/ingress/status.js';
import { StatusWriter } from '../../status/writer.js';

const log = scope('orch');

/** The resource types read (deploy/ grants get, list and watch on exactly these). */
export const INGRESS_TYPES = {
  Ingress: { kind: 'Ingress', group: 'networking.k8s.io', version: 'v1', plural: 'ingresses' },
  IngressClass: { kind: 'IngressClass', group: 'networking.k8s.io', version: 'v1', plural: 'ingressclasses' },
} as const satisfies Record<string, ResourceType>;

export interface IngressControllerOptions extends InformerGroupOptions {
  /** --orchconfig; absent means the in-cluster configuration. */
  kubeconfig?: string;
  /** --appNamespace: only these namespaces' Ingresses; empty: all. */
  namespaces?: readonly string[];
  /** --domain. */
  domain: string;
  /** The mesh config's Ingress fields. */
  settings: IngressSettings;
  /** Where the Gateways are generated (ORCH_INGRESS_NS, else the discovery server's namespace). */
  ingressNamespace: string;
  /** The orchestrator's Services as last read (the registry's), for the ingress Service's addresses. */
  serviceObject: (namespace: string, name: string) => IngressServiceObject | undefined;
  /** The pacing of status writes (PILOT_STATUS_QPS, PILOT_STATUS_BURST, PILOT_STATUS_MAX_WORKERS). */
  status: { qps: number; burst: number; workers: number };
}

/** Notices already logged, by Ingress: logged again only when they change. */
const logged = new Map<string, string>();

function logNotices(translation: IngressTranslation): void {
  for (const key of [...logged.keys()]) if (!translation.notices.has(key)) logged.delete(key);
  for (const [key, notices] of translation.notices) {
    const text = notices.join('\n');
    if (logged.get(key) === text) continue;
    logged.set(key, text);
    notices.forEach((n) => log.warn(n));
  }
}

export class IngressController {
  private readonly ingresses = new Map<string, unknown>();
  private readonly classes = new Map<string, unknown>();
  private readonly informers: InformerGroup;
  private readonly handlers = new Set<() => void>();
  private writer: StatusWriter | undefined;
  /** The Ingresses the last translation served, for a new leader to write their status. */
  private served: readonly string[] = [];

  constructor(private readonly options: IngressControllerOptions) {
    this.informers = new InformerGroup(options);
    const namespaces = options.namespaces?.filter((n) => n !== '') ?? [];
    const changed = () => this.handlers.forEach((h) => h());
    for (const ns of namespaces.length === 0 ? [undefined] : [...new Set(namespaces)]) {
      this.informers.add(`Ingress (networking.k8s.io/v1${ns ? `, namespace ${ns}` : ''})`, collectionPath(INGRESS_TYPES.Ingress, ns), cachingHandlers(this.ingresses, ns, changed));
    }
    this.informers.add('IngressClass (networking.k8s.io/v1)', collectionPath(INGRESS_TYPES.IngressClass), cachingHandlers(this.classes, undefined, changed));
  }

  /** Connects and starts the informers; resolves once both collections have been listed. */
  async start(): Promise<void> {
    const client = OrchestratorClient.connect(this.options.kubeconfig);
    // Ingress status is written by the elected replica only (writeStatusWhile).
    this.writer = new StatusWriter({ client, ...this.options.status, elected: true });
    await this.informers.start(client);
    const { mode, ingressClass, ingressService } = this.options.settings;
    const status = ingressService ? `status.loadBalancer from Service ${this.options.ingressNamespace}/${ingressService}` : 'no ingressService: Ingress status is not written (the Go mesh then uses the gateway Pods\' node addresses; we do not)';
    log.info(`Ingress translation on (ingressControllerMode ${mode}, class ${ingressClass}): Gateways in namespace ${this.options.ingressNamespace}; ${status}`);
  }

  async close(): Promise<void> {
    await Promise.all([this.informers.close(), this.writer?.close()]);
  }

  /** Called after any Ingress or IngressClass change. */
  onChange(handler: () => void): void {
    this.handlers.add(handler);
  }

  /** The translation of what is held now; named ports resolve against `services`. Logs what is not routed, once per change. */
  translate(services: readonly Service[]): IngressTranslation {
    const translation = translateIngresses({
      ingresses: [...this.ingresses.values()].filter(hasName) as OrchIngress[],
      classes: [...this.classes.values()].filter(hasName) as OrchIngressClass[],
      settings: this.options.settings,
      ingressNamespace: this.options.ingressNamespace,
      domain: this.options.domain,
      servicePorts: servicePortsOf(services, this.options.domain),
    });
    logNotices(translation);
    this.served = translation.served;
    this.writeStatus(translation.served);
    return translation;
  }

  /** Writes Ingress status while `leading` holds (the ingress election), starting with what the last translation served. */
  writeStatusWhile(leading: AbortSignal): void {
    if (!this.writer) return;
    this.writer.writeWhile(leading);
    this.writeStatus(this.served);
  }

  /** Queues the status of each served Ingress whose load balancer addresses differ from the wanted ones. */
  private writeStatus(served: readonly string[]): void {
    const { ingressService } = this.options.settings;
    if (!this.writer || !ingressService) return;
    const service = this.options.serviceObject(this.options.ingressNamespace, ingressService);
    const wanted: LoadBalancerIngress[] = loadBalancerIngress(service ? serviceAddresses(service) : []);
    for (const key of served) {
      const held = this.ingresses.get(key) as (OrchIngress & { status?: unknown }) | undefined;
      if (!held || ingressStatus(held.status, wanted) === undefined) continue;
      const path = `${collectionPath(INGRESS_TYPES.Ingress, held.metadata.namespace)}/${held.metadata.name}`;
      this.writer.enqueueTarget({ id: `Ingress/${key}`, path, next: (current) => ingressStatus(current, wanted) });
    }
  }
}

/** Objects as the API serves them always have a name; anything else is not an object to translate. */
function hasName(o: unknown): boolean {
  return typeof (o as { metadata?: { name?: unknown } } | null)?.metadata?.name === 'string';
}

/** The config store's resources with the generated Gateways and VirtualServices added. */
export function withIngressConfig(config: ConfigView, translation: Pick<IngressTranslation, 'gateways' | 'virtualServices'>): ConfigView {
  return {
    list<K extends Kind>(kind: K, namespace?: string): ResourceOf<K>[] {
      const own = config.list(kind, namespace);
      const generated = kind === 'Gateway' ? translation.gateways : kind === 'VirtualService' ? translation.virtualServices : [];
      return [...own, ...(generated.filter((r) => namespace === undefined || r.metadata.namespace === namespace) as ResourceOf<K>[])];
    },
  };
}
