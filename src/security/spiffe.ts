// Workload identity: SPIFFE ids `spiffe://<trust domain>/ns/<namespace>/sa/<service account>`.

export interface Identity {
  readonly trustDomain: string;
  readonly namespace: string;
  readonly serviceAccount: string;
}

const PREFIX = 'spiffe://';
const DEFAULT_SERVICE_ACCOUNT = 'default';

export function spiffeId(id: Identity): string {
  return `${PREFIX}${id.trustDomain}/ns/${id.namespace}/sa/${id.serviceAccount}`;
}

/** The identity a SPIFFE id names, or undefined when it is not of the mesh's form. */
export function parseSpiffeId(uri: string): Identity | undefined {
  if (!uri.startsWith(PREFIX)) return undefined;
  const [trustDomain, ns, namespace, sa, serviceAccount, ...rest] = uri.slice(PREFIX.length).split('/');
  if (rest.length > 0 || ns !== 'ns' || sa !== 'sa' || !trustDomain || !namespace || !serviceAccount) return undefined;
  return { trustDomain, namespace, serviceAccount };
}

/** A workload's identity from its node's namespace and service account (empty = `default`, as the orchestrator). */
export function workloadIdentity(trustDomain: string, namespace: string, serviceAccount: string | undefined): Identity {
  return { trustDomain, namespace, serviceAccount: serviceAccount || DEFAULT_SERVICE_ACCOUNT };
}
