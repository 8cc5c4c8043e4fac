// The object a leader election is held in, read and written through the orchestrator's API: a
// coordination.k8s.io/v1 Lease (the record in its spec) or a ConfigMap (the record as JSON in the
// `control-plane.alpha.kubernetes.io/leader` annotation), the two lock kinds the Go mesh uses. An
// update sends the resourceVersion last read, so of two replicas writing at once one gets 409
// Conflict; a create of a name taken gets 409 AlreadyExists.
import { collectionPath, type OrchestratorClient, type ResourceType } from '../../config/informer.js';

/** Who holds the lock and until when, whatever object it is kept in. */
export interface LeaderRecord {
  /** Empty: released, anyone may take it. */
  readonly holderIdentity: string;
  /** The holder's revision (the Go mesh's key, which its default revision may take over with). */
  readonly holderKey: string;
  readonly leaseDurationSeconds: number;
  readonly acquireTime: string;
  readonly renewTime: string;
  readonly leaderTransitions: number;
}

export type LockKind = 'Lease' | 'ConfigMap';

/** One lock object: read it, create it, or update the one last read. */
export interface Lock {
  /** The record held, and its raw form (a change of it is what resets the expiry clock); undefined: no such object. */
  get(): Promise<{ record: LeaderRecord; raw: string } | undefined>;
  create(record: LeaderRecord): Promise<void>;
  /** Updates the object last read or created; 409 when someone wrote it since. */
  update(record: LeaderRecord): Promise<void>;
  /** `<kind> <namespace>/<name>`, for logs. */
  readonly description: string;
}

const LEASE: ResourceType = { kind: 'Lease', group: 'coordination.k8s.io', version: 'v1', plural: 'leases' };
const CONFIG_MAP: ResourceType = { kind: 'ConfigMap', group: '', version: 'v1', plural: 'configmaps' };
/** The ConfigMap annotation of the record, the orchestrator's own convention. */
export const CONFIG_MAP_RECORD_ANNOTATION = 'control-plane.alpha.kubernetes.io/leader';
/** The Lease annotation of the holder's key (a Lease spec has no field for it). */
export const LEASE_HOLDER_KEY_ANNOTATION = 'leader.mesh.io/holder-key';

interface Meta {
  name?: string;
  namespace?: string;
  resourceVersion?: string;
  annotations?: Record<string, string>;
}

interface LockObject {
  apiVersion: string;
  kind: string;
  metadata: Meta;
}

interface LeaseObject extends LockObject {
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number; acquireTime?: string; renewTime?: string; leaseTransitions?: number };
}

interface ConfigMapObject extends LockObject {
  [field: string]: unknown;
}

/** A Lease's times are MicroTime: RFC 3339 with microseconds. */
function microTime(iso: string): string {
  return iso.replace(/\.(\d{3})Z$/, '.$1000Z');
}

function apiVersionOf(type: ResourceType): string {
  return type.group ? `${type.group}/${type.version}` : type.version;
}

/** What both lock kinds share: the object last read, and create/update of it through the API. */
abstract class ObjectLock<O extends LockObject> implements Lock {
  protected last: O | undefined;
  readonly description: string;

  constructor(
    private readonly client: Pick<OrchestratorClient, 'request'>,
    private readonly type: ResourceType,
    protected readonly namespace: string,
    protected readonly name: string,
  ) {
    this.description = `${type.kind} ${namespace}/${name}`;
  }

  protected abstract recordOf(object: O): LeaderRecord;
  /** The object holding `record`, built on `base` (the one read; undefined: a new one). */
  protected abstract withRecord(base: O | undefined, record: LeaderRecord): O;

  private get path(): string {
    return `${collectionPath(this.type, this.namespace)}/${this.name}`;
  }

  protected blank(): LockObject {
    return { apiVersion: apiVersionOf(this.type), kind: this.type.kind, metadata: { name: this.name, namespace: this.namespace } };
  }

  async get(): Promise<{ record: LeaderRecord; raw: string } | undefined> {
    try {
      this.last = (await this.client.request('GET', this.path)) as O;
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 404) return undefined;
      throw e;
    }
    const record = this.recordOf(this.last);
    return { record, raw: JSON.stringify(record) };
  }

  async create(record: LeaderRecord): Promise<void> {
    this.last = (await this.client.request('POST', collectionPath(this.type, this.namespace), this.withRecord(undefined, record))) as O;
  }

  async update(record: LeaderRecord): Promise<void> {
    if (!this.last) throw new Error(`${this.description}: update before the lock was read`);
    this.last = (await this.client.request('PUT', this.path, this.withRecord(this.last, record))) as O;
  }
}

class LeaseLock extends ObjectLock<LeaseObject> {
  protected recordOf(lease: LeaseObject): LeaderRecord {
    const spec = lease.spec ?? {};
    return {
      holderIdentity: spec.holderIdentity ?? '',
      holderKey: lease.metadata.annotations?.[LEASE_HOLDER_KEY_ANNOTATION] ?? '',
      leaseDurationSeconds: spec.leaseDurationSeconds ?? 0,
      acquireTime: spec.acquireTime ?? '',
      renewTime: spec.renewTime ?? '',
      leaderTransitions: spec.leaseTransitions ?? 0,
    };
  }

  protected withRecord(read: LeaseObject | undefined, r: LeaderRecord): LeaseObject {
    const base = read ?? this.blank();
    const { [LEASE_HOLDER_KEY_ANNOTATION]: _old, ...annotations } = base.metadata.annotations ?? {};
    if (r.holderKey) annotations[LEASE_HOLDER_KEY_ANNOTATION] = r.holderKey;
    return {
      ...base,
      metadata: { ...base.metadata, annotations },
      spec: { holderIdentity: r.holderIdentity, leaseDurationSeconds: r.leaseDurationSeconds, acquireTime: microTime(r.acquireTime), renewTime: microTime(r.renewTime), leaseTransitions: r.leaderTransitions },
    };
  }
}

class ConfigMapLock extends ObjectLock<ConfigMapObject> {
  protected recordOf(cm: ConfigMapObject): LeaderRecord {
    const text = cm.metadata.annotations?.[CONFIG_MAP_RECORD_ANNOTATION];
    let parsed: Partial<LeaderRecord> = {};
    try {
      parsed = text ? (JSON.parse(text) as Partial<LeaderRecord>) : {};
    } catch {
      // A record we cannot read is one nobody holds, as an absent one: it expires and is taken.
    }
    return {
      holderIdentity: typeof parsed.holderIdentity === 'string' ? parsed.holderIdentity : '',
      holderKey: typeof parsed.holderKey === 'string' ? parsed.holderKey : '',
      leaseDurationSeconds: Number(parsed.leaseDurationSeconds ?? 0),
      acquireTime: String(parsed.acquireTime ?? ''),
      renewTime: String(parsed.renewTime ?? ''),
      leaderTransitions: Number(parsed.leaderTransitions ?? 0),
    };
  }

  protected withRecord(read: ConfigMapObject | undefined, r: LeaderRecord): ConfigMapObject {
    const base = read ?? this.blank();
    // A ConfigMap's record times are whole seconds (the orchestrator's Time).
    const seconds = (iso: string) => iso.replace(/\.\d+Z$/, 'Z');
    const record = { ...r, acquireTime: seconds(r.acquireTime), renewTime: seconds(r.renewTime) };
    return { ...base, metadata: { ...base.metadata, annotations: { ...base.metadata.annotations, [CONFIG_MAP_RECORD_ANNOTATION]: JSON.stringify(record) } } };
  }
}

export function lockOf(kind: LockKind, client: Pick<OrchestratorClient, 'request'>, namespace: string, name: string): Lock {
  return kind === 'Lease' ? new LeaseLock(client, LEASE, namespace, name) : new ConfigMapLock(client, CONFIG_MAP, namespace, name);
}
