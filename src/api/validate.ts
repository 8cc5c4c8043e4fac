// The one entry point of validation: stores and the webhook pass an untyped document and get back
// either a typed, normalized resource or every issue found in it.

import { describeValue, joinPath, type Issue } from './errors.js';
import { checkKeys } from './keys.js';
import { checkLabels, checkSemantics } from './semantic.js';
import { checkStructure } from './structural.js';
import { checkName, checkNamespace } from './syntax.js';
import { asRecord } from './values.js';
import {
  API_VERSIONS,
  DEFAULT_NAMESPACE,
  GROUP_OF_KIND,
  KINDS,
  formatKey,
  isKind,
  type AnyResource,
  type Kind,
  type ObjectMeta,
} from './types.js';

export type ValidationResult =
  | { ok: true; resource: AnyResource }
  /** `resource` is `Kind/namespace/name` when the document got far enough to tell. */
  | { ok: false; issues: Issue[]; resource?: string };

const TOP_LEVEL = new Set(['apiVersion', 'kind', 'metadata', 'spec', 'status']);

/**
 * Largest spec accepted, encoded as JSON. A policy is translated into every inbound filter chain
 * of the workloads it selects, at about its own size each, and an xDS response must stay under the
 * proxies' 4 MiB gRPC message limit (see docs/xds-server.md): a larger spec could hold back every
 * later listener update of those proxies, and has no use a few smaller policies would not serve.
 */
export const MAX_SPEC_BYTES = 512 * 1024;

export function apiVersionsOf(kind: Kind): string[] {
  return API_VERSIONS.map((version) => `${GROUP_OF_KIND[kind]}/${version}`);
}

export function validateResource(document: unknown): ValidationResult {
  if (typeof document !== 'object' || document === null || Array.isArray(document)) {
    return { ok: false, issues: [{ path: '', message: `expected a resource (an object with apiVersion, kind, metadata, spec), got ${describeValue(document)}` }] };
  }
  const doc = document as Record<string, unknown>;
  const unsafe = checkKeys(doc);
  const specBytes = unsafe.length === 0 ? JSON.stringify(doc['spec'] ?? {}).length : 0;
  if (specBytes > MAX_SPEC_BYTES) unsafe.push({ path: 'spec', message: `${specBytes} bytes encoded as JSON; at most ${MAX_SPEC_BYTES} (split it into several resources)` });
  if (unsafe.length > 0) return rejectedUnsafe(doc, unsafe);
  const issues: Issue[] = [];
  for (const field of Object.keys(doc)) {
    if (!TOP_LEVEL.has(field)) issues.push({ path: field, message: `unknown field ${JSON.stringify(field)}; expected one of ${[...TOP_LEVEL].join(', ')}` });
  }
  const kind = checkKind(doc['kind'], doc['apiVersion'], issues);
  const metadata = checkMetadata(doc['metadata'], issues);
  const spec = doc['spec'] ?? {};
  if (kind !== undefined) {
    issues.push(...checkStructure(kind, spec, 'spec'), ...checkSemantics(kind, spec, 'spec'));
  }
  if (issues.length > 0 || kind === undefined || metadata === undefined) return rejected(issues, kind, metadata);
  // Sound: the structure of `spec` was just checked against the schema of `kind`.
  const resource = { apiVersion: doc['apiVersion'] as string, kind, metadata, spec } as AnyResource;
  return { ok: true, resource };
}

/** A failed result, naming the resource when kind and metadata were readable. */
function rejected(issues: Issue[], kind: Kind | undefined, metadata: ObjectMeta | undefined): ValidationResult {
  if (kind === undefined || metadata === undefined) return { ok: false, issues };
  return { ok: false, issues, resource: formatKey({ kind, namespace: metadata.namespace, name: metadata.name }) };
}

/**
 * A document no validator may read (see checkKeys): rejected with those issues alone, naming the
 * resource when its kind and metadata are plain strings.
 */
function rejectedUnsafe(doc: Record<string, unknown>, issues: Issue[]): ValidationResult {
  const meta = asRecord(doc['metadata']);
  const name = meta?.['name'];
  const namespace = meta?.['namespace'] ?? DEFAULT_NAMESPACE;
  const kind = doc['kind'];
  if (!isKind(kind) || typeof name !== 'string' || typeof namespace !== 'string') return { ok: false, issues };
  return { ok: false, issues, resource: formatKey({ kind, namespace, name }) };
}

function checkKind(kind: unknown, apiVersion: unknown, issues: Issue[]): Kind | undefined {
  if (kind === undefined) {
    issues.push({ path: 'kind', message: 'required field is missing' });
    return undefined;
  }
  if (!isKind(kind)) {
    issues.push({ path: 'kind', message: `unknown kind ${describeValue(kind)}; expected one of ${KINDS.join(', ')}` });
    return undefined;
  }
  const accepted = apiVersionsOf(kind);
  if (apiVersion === undefined) issues.push({ path: 'apiVersion', message: `required field is missing; expected one of ${accepted.join(', ')}` });
  else if (typeof apiVersion !== 'string' || !accepted.includes(apiVersion)) {
    issues.push({ path: 'apiVersion', message: `unknown apiVersion ${describeValue(apiVersion)} for kind ${kind}; expected one of ${accepted.join(', ')}` });
  }
  return kind;
}

function stringMap(value: unknown, path: string, issues: Issue[]): Record<string, string> | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    issues.push({ path, message: `expected a map of strings, got ${describeValue(value)}` });
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (typeof item !== 'string') issues.push({ path: joinPath(path, key), message: `expected a string, got ${describeValue(item)}` });
  }
  return value as Record<string, string>;
}

/** Checks metadata and returns it normalized (namespace defaulted), or undefined if unusable. */
export function checkMetadata(value: unknown, issues: Issue[]): ObjectMeta | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    issues.push({ path: 'metadata', message: value === undefined ? 'required field is missing' : `expected an object, got ${describeValue(value)}` });
    return undefined;
  }
  const meta = value as Record<string, unknown>;
  const name = meta['name'];
  if (typeof name !== 'string') {
    issues.push({ path: 'metadata.name', message: name === undefined ? 'required field is missing' : `expected a string, got ${describeValue(name)}` });
  } else {
    const problem = checkName(name);
    if (problem !== undefined) issues.push({ path: 'metadata.name', message: problem });
  }
  const namespace = meta['namespace'] ?? DEFAULT_NAMESPACE;
  if (typeof namespace !== 'string') issues.push({ path: 'metadata.namespace', message: `expected a string, got ${describeValue(namespace)}` });
  else {
    const problem = checkNamespace(namespace);
    if (problem !== undefined) issues.push({ path: 'metadata.namespace', message: problem });
  }
  const labels = stringMap(meta['labels'], 'metadata.labels', issues);
  issues.push(...checkLabels(labels, 'metadata.labels'));
  const annotations = stringMap(meta['annotations'], 'metadata.annotations', issues);
  const generation = meta['generation'];
  if (generation !== undefined && !Number.isInteger(generation)) {
    issues.push({ path: 'metadata.generation', message: `expected an integer, got ${describeValue(generation)}` });
  }
  if (typeof name !== 'string' || typeof namespace !== 'string') return undefined;
  const normalized: ObjectMeta = { name, namespace };
  if (labels !== undefined) normalized.labels = labels;
  if (annotations !== undefined) normalized.annotations = annotations;
  for (const field of ['resourceVersion', 'uid', 'creationTimestamp'] as const) {
    if (typeof meta[field] === 'string') normalized[field] = meta[field];
  }
  if (Number.isInteger(generation)) normalized.generation = generation as number;
  return normalized;
}

/**
 * Reads a resource of a known kind without judging its spec, for sources that trust an upstream
 * validator (PILOT_ENABLE_CRD_VALIDATION=false): only what is needed to key and hold it is checked.
 */
export function convertResource(kind: Kind, document: unknown): ValidationResult {
  const doc = asRecord(document);
  const issues: Issue[] = [];
  if (doc === undefined) return { ok: false, issues: [{ path: '', message: `expected an object, got ${describeValue(document)}` }] };
  const unsafe = checkKeys(doc);
  if (unsafe.length > 0) return rejectedUnsafe(doc, unsafe);
  const metadata = checkMetadata(doc['metadata'], issues);
  const spec = doc['spec'] ?? {};
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) issues.push({ path: 'spec', message: `expected an object, got ${describeValue(spec)}` });
  if (issues.length > 0 || metadata === undefined) return rejected(issues, kind, metadata);
  const apiVersion = typeof doc['apiVersion'] === 'string' ? doc['apiVersion'] : apiVersionsOf(kind)[0]!;
  // Unchecked by design: the spec's shape is the upstream validator's responsibility here.
  return { ok: true, resource: { apiVersion, kind, metadata, spec } as AnyResource };
}
