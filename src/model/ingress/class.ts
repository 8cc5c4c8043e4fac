// The orchestrator's Ingress resources (networking.k8s.io/v1) as the discovery server reads them,
// and which of them are ours, decided as the Go mesh decides: the deprecated class annotation
// first, then `spec.ingressClassName` through an IngressClass naming our controller, else the mesh
// config's `ingressControllerMode` (DEFAULT takes class-less Ingresses, STRICT does not, OFF none).

/** The orchestrator's own annotation (not the mesh's), hence its name is kept. */
export const INGRESS_CLASS_ANNOTATION = 'kubernetes.io/ingress.class';
/** The `spec.controller` of an IngressClass whose Ingresses the mesh serves (Go: istio.io/ingress-controller). */
export const MESH_INGRESS_CONTROLLER = 'mesh.io/ingress-controller';

export type IngressControllerMode = 'OFF' | 'DEFAULT' | 'STRICT';
export const INGRESS_CONTROLLER_MODES: readonly IngressControllerMode[] = ['OFF', 'DEFAULT', 'STRICT'];

/** The mesh config fields of the Ingress translation (their defaults are the Go mesh's, renamed). */
export interface IngressSettings {
  /** `ingressControllerMode`; default STRICT. */
  readonly mode: IngressControllerMode;
  /** `ingressClass`: the class annotation value that is ours; default `mesh`. */
  readonly ingressClass: string;
  /** `ingressSelector`: the generated Gateways select `mesh: <this>`; default empty (see gateways.ts). */
  readonly ingressSelector: string;
  /** `ingressService`: the gateway's Service; default `mesh-ingressgateway`. */
  readonly ingressService: string;
}

export const DEFAULT_INGRESS_SETTINGS: IngressSettings = { mode: 'STRICT', ingressClass: 'mesh', ingressSelector: '', ingressService: 'mesh-ingressgateway' };

export interface ServiceBackendPort {
  readonly number?: number;
  readonly name?: string;
}

export interface IngressBackend {
  readonly service?: { readonly name?: string; readonly port?: ServiceBackendPort };
  /** A resource backend: the mesh routes only to services. */
  readonly resource?: unknown;
}

export interface HttpIngressPath {
  readonly path?: string;
  readonly pathType?: string;
  readonly backend?: IngressBackend;
}

export interface IngressRule {
  readonly host?: string;
  readonly http?: { readonly paths?: readonly HttpIngressPath[] };
}

export interface IngressTls {
  readonly hosts?: readonly string[];
  readonly secretName?: string;
}

/** An Ingress as the API serves it (JSON), only the fields the translation reads; nothing is trusted to be present. */
export interface OrchIngress {
  readonly metadata: {
    readonly name: string;
    readonly namespace: string;
    readonly annotations?: Readonly<Record<string, string>>;
    /** RFC 3339, seconds: rules of older Ingresses come first. */
    readonly creationTimestamp?: string;
  };
  readonly spec?: {
    readonly ingressClassName?: string;
    readonly defaultBackend?: IngressBackend;
    readonly tls?: readonly IngressTls[];
    readonly rules?: readonly IngressRule[];
  };
}

export interface OrchIngressClass {
  readonly metadata: { readonly name: string };
  readonly spec?: { readonly controller?: string };
}

/** `namespace/name`, as messages name an Ingress. */
export function ingressName(i: OrchIngress): string {
  return `${i.metadata.namespace}/${i.metadata.name}`;
}

/** Whether the mesh serves this Ingress (the Go mesh's shouldProcessIngressWithClass). */
export function isOurIngress(ingress: OrchIngress, classes: ReadonlyMap<string, OrchIngressClass>, settings: IngressSettings): boolean {
  if (settings.mode === 'OFF') return false;
  const annotated = ingress.metadata.annotations?.[INGRESS_CLASS_ANNOTATION];
  if (annotated !== undefined) return annotated === settings.ingressClass;
  const className = ingress.spec?.ingressClassName;
  const ingressClass = className !== undefined ? classes.get(className) : undefined;
  // A class that names another controller is another controller's, whatever the mode.
  if (ingressClass !== undefined) return ingressClass.spec?.controller === MESH_INGRESS_CONTROLLER;
  return settings.mode === 'DEFAULT';
}
