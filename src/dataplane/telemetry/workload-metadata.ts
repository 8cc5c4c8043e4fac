// The workload at either end of a request, as the standard metrics label it: this proxy's own
// (from its bootstrap node metadata) and a peer's (from the x-envoy-peer-metadata header the
// peer's proxy sent). The header is the Go mesh's: a base64 google.protobuf.Struct of node
// metadata fields, with x-envoy-peer-metadata-id carrying the node id beside it.
import { fromBinary, fromJson, toBinary, toJson, type JsonObject, type JsonValue } from '@bufbuild/protobuf';
import { StructSchema } from '@bufbuild/protobuf/wkt';
import { CANONICAL_NAME_LABEL, CANONICAL_REVISION_LABEL, canonicalService } from '../../common/canonical-service.js';

export const PEER_METADATA_HEADER = 'x-envoy-peer-metadata';
export const PEER_METADATA_ID_HEADER = 'x-envoy-peer-metadata-id';


export interface WorkloadMetadata {
  readonly name: string;
  readonly namespace: string;
  readonly cluster: string;
  readonly workload: string;
  readonly app: string;
  readonly version: string;
  readonly canonicalName: string;
  readonly canonicalRevision: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** The labels a peer needs for the metrics' app, version and canonical tags. */
const TELEMETRY_LABELS = ['app', 'version', CANONICAL_NAME_LABEL, CANONICAL_REVISION_LABEL];

const str = (v: JsonValue | undefined): string => (typeof v === 'string' ? v : '');

function stringMap(v: JsonValue | undefined): Record<string, string> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return {};
  return Object.fromEntries(Object.entries(v).flatMap(([k, x]) => (typeof x === 'string' ? [[k, x]] : [])));
}

const first = (labels: Readonly<Record<string, string>>, ...names: string[]): string => names.map((n) => labels[n] ?? '').find((v) => v !== '') ?? '';

/** The workload of node metadata (NAME, NAMESPACE, CLUSTER_ID, WORKLOAD_NAME, LABELS). */
export function workloadOf(metadata: JsonObject): WorkloadMetadata {
  const labels = stringMap(metadata['LABELS']);
  return {
    name: str(metadata['NAME']),
    namespace: str(metadata['NAMESPACE']),
    cluster: str(metadata['CLUSTER_ID']),
    workload: str(metadata['WORKLOAD_NAME']),
    app: first(labels, 'app', 'app.kubernetes.io/name'),
    version: first(labels, 'version', 'app.kubernetes.io/version'),
    canonicalName: labels[CANONICAL_NAME_LABEL] ?? '',
    canonicalRevision: labels[CANONICAL_REVISION_LABEL] ?? '',
    labels,
  };
}

/**
 * This proxy's workload. The injector labels a pod with its canonical service and revision; a
 * proxy without them (a VM, a process run by hand) gets them derived as the injector derives
 * them, so that its metrics still name a service.
 */
export function localWorkload(metadata: JsonObject): WorkloadMetadata {
  const w = workloadOf(metadata);
  const { name, revision } = canonicalService(w.labels, w.workload);
  return { ...w, canonicalName: name, canonicalRevision: revision };
}

/** What this proxy tells its peers: the header's value, computed once per proxy. */
export function peerHeaderValue(w: WorkloadMetadata, additionalLabels: readonly string[] = []): string {
  const labels: Record<string, string> = {};
  for (const name of [...TELEMETRY_LABELS, ...additionalLabels]) if (w.labels[name]) labels[name] = w.labels[name];
  labels[CANONICAL_NAME_LABEL] = w.canonicalName;
  labels[CANONICAL_REVISION_LABEL] = w.canonicalRevision;
  const fields: JsonObject = { LABELS: labels };
  for (const [k, v] of [['NAME', w.name], ['NAMESPACE', w.namespace], ['CLUSTER_ID', w.cluster], ['WORKLOAD_NAME', w.workload]] as const) if (v) fields[k] = v;
  return Buffer.from(toBinary(StructSchema, fromJson(StructSchema, fields))).toString('base64');
}

/** Decoded headers: a proxy sees few distinct peers, each on many requests; bounded, it starts over past the limit. */
const decoded = new Map<string, WorkloadMetadata | undefined>();
const MAX_DECODED = 1000;

/** A peer's header, or undefined when it does not decode (a peer then counts as unknown); one object per distinct header. */
export function peerOfHeader(value: string): WorkloadMetadata | undefined {
  if (decoded.has(value)) return decoded.get(value);
  if (decoded.size >= MAX_DECODED) decoded.clear();
  const peer = decodePeer(value);
  decoded.set(value, peer);
  return peer;
}

function decodePeer(value: string): WorkloadMetadata | undefined {
  try {
    const json = toJson(StructSchema, fromBinary(StructSchema, Buffer.from(value, 'base64')));
    return typeof json === 'object' && json !== null && !Array.isArray(json) && Object.keys(json).length > 0 ? workloadOf(json) : undefined;
  } catch {
    return undefined;
  }
}

/** This proxy's node as the telemetry filters read it: the node id and cluster, its metadata and workload. */
export interface LocalNode {
  readonly id: string;
  readonly cluster: string;
  readonly metadata: JsonObject;
  readonly workload: WorkloadMetadata;
}

export function localNode(id: string, cluster: string, metadata: JsonObject): LocalNode {
  return { id, cluster, metadata, workload: localWorkload(metadata) };
}
