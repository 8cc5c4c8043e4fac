// WorkloadGroup auto-registration: a proxy whose node metadata names AUTO_REGISTER_GROUP gets a
// WorkloadEntry made from that group's template when it connects, so that it becomes an endpoint
// of the services selecting it. The entry lives while any stream of the proxy is connected and is
// deleted PILOT_WORKLOAD_ENTRY_GRACE_PERIOD after the last one ends; a reconnect within the grace
// period keeps (and updates) the same entry. As in the Go mesh, only a proxy whose identity is
// verified registers, and only as the group template's service account when it names one: an
// entry makes its proxy an endpoint of services, which an unauthenticated stream must not claim.
//
// Health (PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS, ./workload-health.ts): an entry made for a
// proxy whose agent runs a readinessProbe is health-checked, and that proxy's reports set its
// Healthy condition. A proxy may instead name an existing entry (WORKLOAD_ENTRY metadata); when
// that entry takes health reports, the proxy reports for it once its identity is verified, and
// its condition is forgotten a grace period after its last stream ends.
//
// Entries are written to an in-memory store of their own, not to the config store: the file store
// is read-only config the user owns (we never write into --configDir), and an auto-registered
// entry belongs to the connection that made it, not to the user's configuration. The
// ServiceEntry registry reads WorkloadEntries from both stores. As a consequence the entries do not
// outlive the discovery server: after a restart the proxies reconnect and register again.
import { isIP } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import { formatKey, NETWORKING_GROUP, type WorkloadEntry, type WorkloadEntrySpec, type WorkloadGroup } from '../api/types.js';
import { settingDefault } from '../common/env.js';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import type { MemoryStore } from '../config/memory.js';
import type { ConfigStore } from '../config/store.js';
import type { Proxy } from '../model/proxy.js';
import type { HealthReport } from '../envoy/types.js';
import { HEALTH_CHECKS_ANNOTATION, takesHealthReports, type WorkloadHealth } from './workload-health.js';

const log = scope('wle');

/** Annotations on an auto-registered entry: its group, its controller, and its connection times. */
export const AUTO_REGISTRATION_GROUP_ANNOTATION = 'networking.mesh.io/autoRegistrationGroup';
export const WORKLOAD_CONTROLLER_ANNOTATION = 'networking.mesh.io/workloadController';
export const CONNECTED_AT_ANNOTATION = 'networking.mesh.io/connectedAt';
export const DISCONNECTED_AT_ANNOTATION = 'networking.mesh.io/disconnectedAt';

/** A connecting proxy: its parsed identity, its stream and its gRPC peer address. */
export interface RegisteringProxy {
  readonly proxy: Proxy;
  readonly connectionId: string;
  /** The gRPC peer, e.g. `10.0.0.1:53312`; its IP is the address when INSTANCE_IPS is absent. */
  readonly peer: string;
  /** Its namespace and service account were verified against its credential (XDS_AUTH). */
  readonly verified?: boolean;
}

export interface AutoRegistrationOptions {
  /** Where WorkloadGroups (and the user's own WorkloadEntries) are read. */
  readonly config: Pick<ConfigStore, 'get'>;
  /** Where auto-registered WorkloadEntries are written; the ServiceEntry registry reads it. */
  readonly entries: MemoryStore;
  /** PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION. */
  readonly enabled?: boolean;
  /** PILOT_WORKLOAD_ENTRY_GRACE_PERIOD, ms. */
  readonly gracePeriodMs?: number;
  /** Written in the workloadController annotation: which discovery server owns the entry. */
  readonly controllerId?: string;
  /** The clock, for the connection-time annotations. */
  readonly now?: () => Date;
  /** Where health reports go; without it (or disabled) they are not taken. */
  readonly health?: WorkloadHealth;
}

/** A registration that cannot be made (unknown group, no address, a user entry of that name). */
export class AutoRegistrationError extends Error {}

export interface Registration {
  readonly entry: WorkloadEntry;
  /** True when the entry is new or its spec changed: the service model changed with it. */
  readonly changed: boolean;
}

interface Live {
  /** Made by auto-registration (in `entries`), else the user's entry the proxy named (in `config`). */
  readonly auto: boolean;
  readonly connections: Set<string>;
  cleanup?: NodeJS.Timeout;
}

/** The IP of a gRPC peer string (`ip:port`, `[ipv6]:port`, `ipv6:port`, optionally `ipv4:`-prefixed). */
export function peerIp(peer: string): string | undefined {
  const bare = peer.replace(/^ipv[46]:/, '');
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(bare);
  const colon = bare.lastIndexOf(':');
  const candidates = [bracketed?.[1], colon > 0 ? bare.slice(0, colon) : undefined, bare];
  const ip = candidates.find((c): c is string => c !== undefined && isIP(c) !== 0);
  // IPv4 clients of a dual-stack socket show up as IPv4-mapped IPv6 addresses.
  return ip?.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '');
}

/** `<group>-<address>`, with the address's `.` and `:` made name-safe. */
export function autoEntryName(group: string, address: string): string {
  return `${group}-${address.replace(/[.:]/g, '-')}`.toLowerCase();
}

export class AutoRegistration {
  readonly enabled: boolean;
  private readonly gracePeriodMs: number;
  private readonly controllerId: string;
  private readonly now: () => Date;
  /** By entry key (`namespace/name`). */
  private readonly live = new Map<string, Live>();
  /** Entry key of each registered stream. */
  private readonly byConnection = new Map<string, string>();
  /** Streams already told why their health reports are not taken (once each). */
  private readonly ignoredReports = new Set<string>();

  constructor(private readonly opts: AutoRegistrationOptions) {
    this.enabled = opts.enabled ?? settingDefault('PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION');
    this.gracePeriodMs = opts.gracePeriodMs ?? settingDefault('PILOT_WORKLOAD_ENTRY_GRACE_PERIOD');
    this.controllerId = opts.controllerId ?? 'pilot-discovery';
    this.now = opts.now ?? (() => new Date());
  }

  /**
   * Registers (or refreshes) the entry of a connecting proxy. Undefined when the proxy asks for no
   * group or auto-registration is off; throws AutoRegistrationError when the entry cannot be made.
   */
  register(p: RegisteringProxy): Registration | undefined {
    const group = p.proxy.autoRegisterGroup;
    if (!group || !this.enabled) return p.proxy.workloadEntry && this.opts.health?.enabled ? this.bind(p, p.proxy.workloadEntry) : undefined;
    try {
      return this.registerIn(p, group);
    } catch (e) {
      counter('auto_registration_errors_total').inc();
      throw e;
    }
  }

  private registerIn(p: RegisteringProxy, groupName: string): Registration {
    const ns = p.proxy.namespace;
    const group = this.opts.config.get({ kind: 'WorkloadGroup', namespace: ns, name: groupName });
    if (!group) {
      throw new AutoRegistrationError(
        `node.metadata.AUTO_REGISTER_GROUP: no WorkloadGroup "${groupName}" in namespace "${ns}" (proxy ${p.proxy.nodeId})`,
      );
    }
    if (!p.verified) {
      throw new AutoRegistrationError(`proxy ${p.proxy.nodeId}: registration into WorkloadGroup ${ns}/${groupName} needs a verified identity (XDS_AUTH and PILOT_ENABLE_XDS_IDENTITY_CHECK on an authenticated stream)`);
    }
    const account = group.spec.template.serviceAccount;
    if (account && account !== p.proxy.serviceAccount) {
      throw new AutoRegistrationError(`proxy ${p.proxy.nodeId} is service account ${p.proxy.serviceAccount || '(none)'}; WorkloadGroup ${ns}/${groupName} registers ${account} only`);
    }
    const address = p.proxy.metadata['INSTANCE_IPS'] ? p.proxy.ipAddresses[0] : peerIp(p.peer);
    if (!address) throw new AutoRegistrationError(`proxy ${p.proxy.nodeId}: no INSTANCE_IPS and no IP in the gRPC peer "${p.peer}" to register`);
    const name = autoEntryName(groupName, address);
    const key = `${ns}/${name}`;
    const userEntry = this.opts.config.get({ kind: 'WorkloadEntry', namespace: ns, name });
    if (userEntry) {
      throw new AutoRegistrationError(`${formatKey({ kind: 'WorkloadEntry', namespace: ns, name })} is declared in the configuration; it is not replaced by auto-registration`);
    }
    const before = this.opts.entries.get({ kind: 'WorkloadEntry', namespace: ns, name });
    const entry = this.entryFromGroup(group, name, address, p.proxy);
    if (group.spec.probe && !p.proxy.healthProbed) {
      log.warn(`WorkloadGroup ${ns}/${groupName} has spec.probe, but the ProxyConfig of ${p.proxy.nodeId} has no readinessProbe: its agent does not probe, so WorkloadEntry ${key} is not health-checked (set the agent's readinessProbe to the group's probe)`);
    }
    this.opts.entries.apply(entry);
    this.attach(key, p.connectionId, true);

    counter('auto_registration_success_total').inc();
    if (before) counter('auto_registration_updates_total').inc();
    log.info(`${before ? 'refreshed' : 'registered'} WorkloadEntry ${key} (address ${address}) from WorkloadGroup ${ns}/${groupName} for ${p.proxy.nodeId}`);
    return { entry: this.opts.entries.get({ kind: 'WorkloadEntry', namespace: ns, name })!, changed: !before || !isDeepStrictEqual(before.spec, entry.spec) };
  }

  /**
   * WORKLOAD_ENTRY: the proxy runs for an entry of the user's. When the entry takes health
   * reports, the proxy reports for it, provided its identity is verified and is the entry's.
   */
  private bind(p: RegisteringProxy, name: string): Registration | undefined {
    const ns = p.proxy.namespace;
    const entry = this.opts.config.get({ kind: 'WorkloadEntry', namespace: ns, name });
    if (!entry) throw new AutoRegistrationError(`node.metadata.WORKLOAD_ENTRY: no WorkloadEntry "${name}" in namespace "${ns}" (proxy ${p.proxy.nodeId})`);
    const key = `${ns}/${name}`;
    if (!takesHealthReports(entry)) {
      log.info(`WorkloadEntry ${key} has no ${HEALTH_CHECKS_ANNOTATION} annotation: the health reports of ${p.proxy.nodeId} are not taken`);
      return undefined;
    }
    if (!p.verified) {
      throw new AutoRegistrationError(`WorkloadEntry ${key} takes health reports only from a proxy whose identity is verified (XDS_AUTH, PILOT_ENABLE_XDS_IDENTITY_CHECK); that of ${p.proxy.nodeId} is not`);
    }
    const account = entry.spec.serviceAccount;
    if (account && account !== p.proxy.serviceAccount) {
      throw new AutoRegistrationError(`WorkloadEntry ${key} runs as service account ${account}; proxy ${p.proxy.nodeId} is ${p.proxy.serviceAccount || 'of no service account'}`);
    }
    this.attach(key, p.connectionId, false);
    log.info(`${p.proxy.nodeId} reports the health of WorkloadEntry ${key}`);
    return { entry, changed: false };
  }

  private attach(key: string, connectionId: string, auto: boolean): void {
    let live = this.live.get(key);
    if (!live) this.live.set(key, (live = { auto, connections: new Set() }));
    clearTimeout(live.cleanup);
    live.cleanup = undefined;
    live.connections.add(connectionId);
    this.byConnection.set(connectionId, key);
  }

  /** A HealthInformation request on a stream: the Healthy condition of the stream's entry. */
  reportHealth(connectionId: string, report: HealthReport): void {
    const health = this.opts.health;
    if (!health?.enabled) return;
    const key = this.byConnection.get(connectionId);
    const entry = key === undefined ? undefined : this.entryAt(key);
    const ignored = !entry
      ? 'the proxy names no WorkloadGroup (AUTO_REGISTER_GROUP) and no health-checked WorkloadEntry (WORKLOAD_ENTRY)'
      : !takesHealthReports(entry)
        ? `WorkloadEntry ${key} is not health-checked (its proxy's ProxyConfig had no readinessProbe when it registered)`
        : undefined;
    if (ignored !== undefined || !entry) {
      if (!this.ignoredReports.has(connectionId)) log.warn(`health reports of ${connectionId} are not taken: ${ignored}`);
      this.ignoredReports.add(connectionId);
      return;
    }
    health.report(entry, report.healthy, report.message);
  }

  private entryAt(key: string): WorkloadEntry | undefined {
    const [namespace, name] = key.split('/') as [string, string];
    const store = this.live.get(key)?.auto === false ? this.opts.config : this.opts.entries;
    return store.get({ kind: 'WorkloadEntry', namespace, name });
  }

  /** A stream ended: after its entry's last stream, the entry is marked and deleted after the grace period. */
  unregister(connectionId: string): void {
    this.ignoredReports.delete(connectionId);
    const key = this.byConnection.get(connectionId);
    if (key === undefined) return;
    this.byConnection.delete(connectionId);
    const live = this.live.get(key)!;
    live.connections.delete(connectionId);
    if (live.connections.size > 0) return;
    if (!live.auto) {
      live.cleanup = setTimeout(() => this.forgetHealth(key), Math.max(0, this.gracePeriodMs));
      return;
    }
    const [namespace, name] = key.split('/') as [string, string];
    const current = this.opts.entries.get({ kind: 'WorkloadEntry', namespace, name });
    if (current) {
      this.opts.entries.apply({
        ...current,
        metadata: { ...current.metadata, annotations: { ...current.metadata.annotations, [DISCONNECTED_AT_ANNOTATION]: this.now().toISOString() } },
      });
    }
    counter('auto_registration_unregister_total').inc();
    log.info(`WorkloadEntry ${key}: last proxy disconnected; deleting it in ${this.gracePeriodMs}ms unless it reconnects`);
    live.cleanup = setTimeout(() => this.cleanup(key), Math.max(0, this.gracePeriodMs));
  }

  /** Registered entries with their live stream counts, for debug views and tests. */
  registered(): Array<{ key: string; connections: number }> {
    return [...this.live].map(([key, l]) => ({ key, connections: l.connections.size }));
  }

  /** Stops the cleanup timers (the entries go with the process). */
  close(): void {
    for (const l of this.live.values()) clearTimeout(l.cleanup);
  }

  private cleanup(key: string): void {
    const live = this.live.get(key);
    if (!live || live.connections.size > 0) return;
    const entry = this.entryAt(key);
    this.live.delete(key);
    if (!entry) return;
    this.opts.entries.delete({ kind: 'WorkloadEntry', namespace: entry.metadata.namespace, name: entry.metadata.name });
    // After the delete: an entry registered again under this name starts with no health.
    this.opts.health?.clear(entry);
    counter('auto_registration_deletes_total').inc();
    log.info(`deleted auto-registered WorkloadEntry ${key}: disconnected for ${this.gracePeriodMs}ms`);
  }

  /** A user's entry whose proxy stayed away for the grace period: its last report is stale. */
  private forgetHealth(key: string): void {
    const live = this.live.get(key);
    if (!live || live.connections.size > 0) return;
    const entry = this.entryAt(key);
    this.live.delete(key);
    if (entry) this.opts.health?.clear(entry);
  }

  /**
   * The group's template with the proxy's address, its labels over the template's (the workload
   * knows its own labels best), the template's service account else the proxy's, and the group's
   * metadata labels and annotations on the entry.
   */
  private entryFromGroup(group: WorkloadGroup, name: string, address: string, proxy: Proxy): WorkloadEntry {
    const template = group.spec.template;
    const spec: WorkloadEntrySpec = {
      ...template,
      address,
      labels: { ...template.labels, ...proxy.labels },
    };
    const serviceAccount = template.serviceAccount || proxy.serviceAccount;
    if (serviceAccount) spec.serviceAccount = serviceAccount;
    if (!spec.network && typeof proxy.metadata['NETWORK'] === 'string' && proxy.metadata['NETWORK']) spec.network = proxy.metadata['NETWORK'];
    return {
      apiVersion: `${NETWORKING_GROUP}/v1`,
      kind: 'WorkloadEntry',
      metadata: {
        name,
        namespace: group.metadata.namespace,
        labels: { ...group.spec.metadata?.labels, ...spec.labels },
        annotations: {
          ...group.spec.metadata?.annotations,
          [AUTO_REGISTRATION_GROUP_ANNOTATION]: group.metadata.name,
          [WORKLOAD_CONTROLLER_ANNOTATION]: this.controllerId,
          [CONNECTED_AT_ANNOTATION]: this.now().toISOString(),
          ...(proxy.healthProbed ? { [HEALTH_CHECKS_ANNOTATION]: 'true' } : {}),
        },
      },
      spec,
    };
  }
}
