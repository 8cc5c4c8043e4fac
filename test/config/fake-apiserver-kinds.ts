// The orchestrator's own kinds the stand-in API server (./fake-apiserver.ts) serves, and their
// discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`) as kubectl reads them.

export interface BuiltinResource {
  kind: string;
  /** group/version, `v1` for the core group. */
  groupVersion: string;
  plural: string;
  namespaced: boolean;
}

/** The orchestrator's own kinds the stand-in serves, also in its discovery documents. */
export const BUILTINS: readonly BuiltinResource[] = [
  { kind: 'Service', groupVersion: 'v1', plural: 'services', namespaced: true },
  { kind: 'Endpoints', groupVersion: 'v1', plural: 'endpoints', namespaced: true },
  { kind: 'Pod', groupVersion: 'v1', plural: 'pods', namespaced: true },
  { kind: 'ConfigMap', groupVersion: 'v1', plural: 'configmaps', namespaced: true },
  { kind: 'Secret', groupVersion: 'v1', plural: 'secrets', namespaced: true },
  { kind: 'ServiceAccount', groupVersion: 'v1', plural: 'serviceaccounts', namespaced: true },
  { kind: 'Node', groupVersion: 'v1', plural: 'nodes', namespaced: false },
  { kind: 'Namespace', groupVersion: 'v1', plural: 'namespaces', namespaced: false },
  { kind: 'Lease', groupVersion: 'coordination.k8s.io/v1', plural: 'leases', namespaced: true },
  { kind: 'EndpointSlice', groupVersion: 'discovery.k8s.io/v1', plural: 'endpointslices', namespaced: true },
  { kind: 'Deployment', groupVersion: 'apps/v1', plural: 'deployments', namespaced: true },
  { kind: 'Ingress', groupVersion: 'networking.k8s.io/v1', plural: 'ingresses', namespaced: true },
  { kind: 'IngressClass', groupVersion: 'networking.k8s.io/v1', plural: 'ingressclasses', namespaced: false },
  { kind: 'PodDisruptionBudget', groupVersion: 'policy/v1', plural: 'poddisruptionbudgets', namespaced: true },
  { kind: 'ClusterRole', groupVersion: 'rbac.authorization.k8s.io/v1', plural: 'clusterroles', namespaced: false },
  { kind: 'ClusterRoleBinding', groupVersion: 'rbac.authorization.k8s.io/v1', plural: 'clusterrolebindings', namespaced: false },
  { kind: 'Role', groupVersion: 'rbac.authorization.k8s.io/v1', plural: 'roles', namespaced: true },
  { kind: 'RoleBinding', groupVersion: 'rbac.authorization.k8s.io/v1', plural: 'rolebindings', namespaced: true },
  { kind: 'CustomResourceDefinition', groupVersion: 'apiextensions.k8s.io/v1', plural: 'customresourcedefinitions', namespaced: false },
  { kind: 'MutatingWebhookConfiguration', groupVersion: 'admissionregistration.k8s.io/v1', plural: 'mutatingwebhookconfigurations', namespaced: false },
  { kind: 'ValidatingWebhookConfiguration', groupVersion: 'admissionregistration.k8s.io/v1', plural: 'validatingwebhookconfigurations', namespaced: false },
];
export const BUILTIN_PLURALS: Readonly<Record<string, string>> = Object.fromEntries(BUILTINS.map((b) => [b.kind, b.plural]));
const VERBS = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'];

/** The discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`) of the builtin kinds. */
export function discovery(path: string): unknown {
  const versions = [...new Set(BUILTINS.map((b) => b.groupVersion))];
  if (path === '/api') return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [] };
  if (path === '/apis') {
    const groups = versions.filter((gv) => gv.includes('/')).map((gv) => {
      const [name, version] = gv.split('/') as [string, string];
      const v = { groupVersion: gv, version };
      return { name, versions: [v], preferredVersion: v };
    });
    return { kind: 'APIGroupList', apiVersion: 'v1', groups };
  }
  const groupVersion = path === '/api/v1' ? 'v1' : path.replace(/^\/apis\//, '');
  if (!versions.includes(groupVersion)) return undefined;
  const resources = BUILTINS.filter((b) => b.groupVersion === groupVersion).map((b) => ({
    name: b.plural,
    singularName: b.kind.toLowerCase(),
    namespaced: b.namespaced,
    kind: b.kind,
    verbs: VERBS,
  }));
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources };
}
