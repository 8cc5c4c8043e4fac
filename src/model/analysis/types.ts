// Config analysis: pure analyzers over one snapshot of the config the discovery server holds and
// the workloads it knows, each returning messages with a code, the resource and the field path.
import type { Kind, ResourceOf } from '../../api/types.js';
import type { WorkloadRef } from '../selection.js';
import { CODES, type CodeName } from './codes.js';

export interface ResourceRef {
  readonly kind: Kind;
  readonly namespace: string;
  readonly name: string;
}

export interface AnalysisMessage {
  /** `MSH0101`, ... (docs/operations.md lists them). */
  readonly code: string;
  /** The code's name, e.g. `ReferencedResourceNotFound`. */
  readonly name: string;
  readonly level: 'Error' | 'Warning' | 'Info';
  readonly message: string;
  readonly resource: ResourceRef;
  /** Path of the field at fault inside the resource, e.g. `spec.http[0].route[1].destination.subset`. */
  readonly path: string;
}

/** Everything an analyzer may read; built once per analysis at the edge. */
export interface AnalysisInput {
  list<K extends Kind>(kind: K): readonly ResourceOf<K>[];
  /** Workloads known to the server: WorkloadEntries (configured and auto-registered) and connected proxies. */
  readonly workloads: readonly WorkloadRef[];
  /** Connected gateway (router) proxies. */
  readonly gateways: readonly WorkloadRef[];
  readonly rootNamespace: string;
  /** `--domain`, to qualify short host names. */
  readonly domain: string;
}

export interface Analyzer {
  /** A short name, e.g. `virtualservice.subset`. */
  readonly name: string;
  analyze(input: AnalysisInput): AnalysisMessage[];
}

export function message(code: CodeName, resource: { kind: Kind; metadata: { namespace: string; name: string } }, path: string, text: string): AnalysisMessage {
  const c = CODES[code];
  return { code: c.code, name: code, level: c.level, message: text, resource: { kind: resource.kind, namespace: resource.metadata.namespace, name: resource.metadata.name }, path };
}

/** The fully qualified form of a host as written in a resource of namespace `ns`. */
export function qualifiedHost(host: string, ns: string, domain: string): string {
  return host.includes('.') || host.includes('*') ? host : `${host}.${ns}.svc.${domain}`;
}

export function formatLabels(labels: Readonly<Record<string, string>>): string {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(',');
}
