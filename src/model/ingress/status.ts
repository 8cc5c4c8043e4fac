// The `status.loadBalancer.ingress` the Go mesh writes on the Ingresses it serves: the addresses of
// the mesh config's `ingressService` in the ingress namespace (its external name, else its load
// balancer's IPs or host names and its external IPs), IPs as `ip`, anything else as `hostname`,
// ordered by host name then IP. Pure; registry/orchestrator/ingress.ts writes it.
import { compareText } from '../../common/compare.js';
import { isIP } from 'node:net';

export interface LoadBalancerIngress {
  readonly ip?: string;
  readonly hostname?: string;
}

/** The Service fields read (JSON as the API serves it). */
export interface IngressServiceObject {
  readonly spec?: { readonly type?: string; readonly externalName?: string; readonly externalIPs?: readonly string[] };
  readonly status?: { readonly loadBalancer?: { readonly ingress?: readonly LoadBalancerIngress[] } };
}

export function serviceAddresses(service: IngressServiceObject): string[] {
  if (service.spec?.type === 'ExternalName') return service.spec.externalName ? [service.spec.externalName] : [];
  const balanced = (service.status?.loadBalancer?.ingress ?? []).map((i) => (i.ip ? i.ip : (i.hostname ?? ''))).filter((a) => a !== '');
  return [...balanced, ...(service.spec?.externalIPs ?? [])];
}

export function loadBalancerIngress(addresses: readonly string[]): LoadBalancerIngress[] {
  const entries: LoadBalancerIngress[] = addresses.map((a) => (isIP(a) ? { ip: a } : { hostname: a }));
  return entries.sort((a, b) => compareText(a.hostname ?? '', b.hostname ?? '') || compareText(a.ip ?? '', b.ip ?? ''));
}

/** The Ingress status with `loadBalancer.ingress` set to `wanted`; undefined when it already is. */
export function ingressStatus(current: unknown, wanted: readonly LoadBalancerIngress[]): Record<string, unknown> | undefined {
  const status = typeof current === 'object' && current !== null ? (current as Record<string, unknown>) : {};
  const have = (status['loadBalancer'] as { ingress?: unknown } | undefined)?.ingress ?? [];
  const plain = (l: readonly LoadBalancerIngress[]) => JSON.stringify(l.map((i) => ({ ip: i.ip, hostname: i.hostname })));
  if (Array.isArray(have) && plain(have as LoadBalancerIngress[]) === plain(wanted)) return undefined;
  return { ...status, loadBalancer: { ...(status['loadBalancer'] as object | undefined), ingress: wanted.map((i) => ({ ...i })) } };
}
