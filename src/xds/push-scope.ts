// Push scope: which xDS types a change may alter. Each type's module (generators/lds.ts, ...) owns
// its rule, as the Go mesh keeps ldsNeedsPush beside its LDS generator; this file only names the
// triggers and asks the registered types, so the server and the CLI hold no per-type switch.
import type { ConfigEvent } from '../config/store.js';
import type { PushEvent } from './debounce.js';

/** What happened, as the push scope rules see it. */
export type PushTrigger =
  /** A config resource of this kind was added, changed or deleted. */
  | { readonly source: 'config'; readonly kind: string }
  /** The service registry: a service (hosts, ports, resolution) changed. */
  | { readonly source: 'service' }
  /** The service registry: only the instances of a service changed; `headless`: of a headless one (in the name table too). */
  | { readonly source: 'endpoints'; readonly headless?: boolean }
  /** The JWKS resolver: the key set fetched from this jwksUri changed. */
  | { readonly source: 'jwks'; readonly uri: string }
  /** The credential store: a credentialName Secret was added, rotated or deleted. */
  | { readonly source: 'credential'; readonly namespace: string; readonly name: string };

/** A served type as push scope sees it. */
export interface PushScoped {
  readonly typeUrl: string;
  /** Whether the trigger may change this type's resources for some proxy. */
  pushedBy(trigger: PushTrigger): boolean;
}

/**
 * Kinds whose effect reaches proxies through the service registry: the registry's own service and
 * endpoint events push for them, and the proxies at a changed WorkloadEntry's address get every
 * type (see workloadAddresses). A WorkloadGroup only shapes future registrations.
 */
const REGISTRY_KINDS: ReadonlySet<string> = new Set(['ServiceEntry', 'WorkloadEntry', 'WorkloadGroup']);

/** Policy kinds: they only reach the inbound security filters, i.e. listeners. */
export const SECURITY_KINDS: ReadonlySet<string> = new Set(['AuthorizationPolicy', 'RequestAuthentication', 'PeerAuthentication']);

/** A config change whose own event pushes (not one the registry pushes for). */
export function isMeshConfigChange(t: PushTrigger): t is Extract<PushTrigger, { source: 'config' }> {
  return t.source === 'config' && !REGISTRY_KINDS.has(t.kind);
}

/**
 * Kinds that only reach listeners: the security policies (inbound filters) and Telemetry (access
 * loggers, stats filters; the clusters' service metadata does not depend on it). The Go mesh skips
 * Telemetry for CDS, EDS, RDS and NDS as well.
 */
const LISTENER_ONLY_KINDS: ReadonlySet<string> = new Set([...SECURITY_KINDS, 'Telemetry']);

/** A config change of a kind that may reach more than listeners (Sidecar, DestinationRule, ...: it may change anything). */
export function reachesBeyondListeners(t: PushTrigger): boolean {
  return isMeshConfigChange(t) && !LISTENER_ONLY_KINDS.has(t.kind);
}

function reasonOf(t: PushTrigger): string {
  switch (t.source) {
    case 'config':
      return 'config';
    case 'service':
      return 'service';
    case 'endpoints':
      return 'endpoint';
    case 'jwks':
      return `jwks:${t.uri}`;
    case 'credential':
      return `secret:${t.namespace}/${t.name}`;
  }
}

/**
 * The push for a trigger: the types whose rule says yes (none: no push; all: every type, which also
 * covers types a proxy watches that are pushed by name). Endpoint-only pushes are marked for the
 * debouncer (PILOT_ENABLE_EDS_DEBOUNCE).
 */
export function pushFor(types: readonly PushScoped[], trigger: PushTrigger): PushEvent | undefined {
  const pushed = types.filter((t) => t.pushedBy(trigger));
  if (pushed.length === 0) return undefined;
  const every = pushed.length === types.length;
  return {
    reason: reasonOf(trigger),
    ...(every ? {} : { types: new Set(pushed.map((t) => t.typeUrl)) }),
    ...(trigger.source === 'endpoints' ? { endpointsOnly: true } : {}),
  };
}

/**
 * The addresses of the WorkloadEntries a config event changes: the proxies at them get every type,
 * since their own inbound listeners and clusters come from the entry.
 */
export function workloadAddresses(e: ConfigEvent): string[] {
  return [e.old, e.new].flatMap((we) => (we?.kind === 'WorkloadEntry' && we.spec.address ? [we.spec.address] : []));
}
