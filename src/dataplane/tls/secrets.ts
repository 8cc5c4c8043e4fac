// The proxy's secrets, shared by every TLS context of its listeners and clusters: the bootstrap's
// static secrets and those that arrive over SDS (the ADS stream, or a gRPC SDS server such as the
// agent's on its Unix socket). A TLS context holds secret names, never the secret: each new
// handshake reads the current one, so a renewed certificate applies to the next connection while
// established connections keep theirs (Envoy's rotation).
import { create, type Message } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { SecretsConfigDumpSchema, type SecretsConfigDump } from '../../gen/envoy/admin/v3/config_dump_pb.js';
import type { ConfigSource } from '../../gen/envoy/config/core/v3/config_source_pb.js';
import { DataSourceSchema } from '../../gen/envoy/config/core/v3/base_pb.js';
import { ApiConfigSource_ApiType } from '../../gen/envoy/config/core/v3/config_source_pb.js';
import { SecretSchema, type SdsSecretConfig, type Secret } from '../../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { durationMs } from '../../common/duration.js';
import type { AdsResource, AdsUpdate } from '../../envoy/ads-client.js';
import { ConfigError } from '../../envoy/config-error.js';
import { pack } from '../../envoy/types.js';

/** Where a dynamic secret comes from: the ADS stream, or the SDS server behind a static cluster. */
export type SdsSource = { readonly kind: 'ads' } | { readonly kind: 'cluster'; readonly cluster: string };

/** A TLS context's reference to one secret. */
export interface SecretRef {
  readonly name: string;
  /** Absent: a static secret of the bootstrap. */
  readonly source?: SdsSource;
}

/** Envoy's default initial_fetch_timeout: how long warming waits for a secret. */
const DEFAULT_INITIAL_FETCH_TIMEOUT_MS = 15_000;

interface DynamicSecret {
  readonly secret: Secret;
  readonly version: string;
  readonly lastUpdated: Date;
}

interface Request {
  readonly ref: SecretRef;
  readonly since: number;
  /** 0: wait for it indefinitely (initial_fetch_timeout 0s). */
  readonly timeoutMs: number;
}

/** The SDS config source a secret is fetched from; anything this proxy cannot fetch from is a ConfigError. */
export function sdsSourceOf(c: ConfigSource, field: string): SdsSource {
  const s = c.configSourceSpecifier;
  if (s.case === 'ads') return { kind: 'ads' };
  if (s.case !== 'apiConfigSource') throw new ConfigError(field, `config source ${s.case ?? '(none)'} is not supported for secrets; use ads or api_config_source (GRPC)`);
  const api = s.value;
  if (api.apiType !== ApiConfigSource_ApiType.GRPC) throw new ConfigError(`${field}.api_config_source.api_type`, `${ApiConfigSource_ApiType[api.apiType]} is not supported; use GRPC`);
  const svc = api.grpcServices[0];
  if (api.grpcServices.length !== 1 || svc?.targetSpecifier.case !== 'envoyGrpc') {
    throw new ConfigError(`${field}.api_config_source.grpc_services`, 'exactly one envoy_grpc service (a static cluster) is required');
  }
  return { kind: 'cluster', cluster: svc.targetSpecifier.value.clusterName };
}

export class SecretManager {
  private readonly statics = new Map<string, Secret>();
  private dynamic = new Map<string, DynamicSecret>();
  private readonly requests = new Map<string, Request>();
  private readonly listeners = new Set<() => void>();
  /** Bumped on every change, so that TLS contexts rebuild their node:tls context lazily. */
  generation = 0;
  /**
   * The main process fetches what is referenced (sds.ts); a worker leaves this unset and gets the
   * secrets the main process applied.
   */
  subscriber?: (ref: SecretRef & { source: SdsSource }) => void;

  addStatic(secrets: readonly Secret[], field = 'static_resources.secrets'): void {
    secrets.forEach((s, i) => {
      if (!s.name) throw new ConfigError(`${field}[${i}].name`, 'a secret name is required');
      this.statics.set(s.name, s);
    });
  }

  /** The reference an SdsSecretConfig makes; dynamic ones are subscribed to at once. */
  reference(c: SdsSecretConfig, field: string): SecretRef {
    if (!c.name) throw new ConfigError(`${field}.name`, 'a secret name is required');
    if (!c.sdsConfig) {
      if (!this.statics.has(c.name)) throw new ConfigError(`${field}.name`, `unknown static secret ${JSON.stringify(c.name)} (no sds_config, and static_resources.secrets has no such secret)`);
      return { name: c.name };
    }
    const source = sdsSourceOf(c.sdsConfig, `${field}.sds_config`);
    if (!this.requests.has(c.name)) {
      this.requests.set(c.name, { ref: { name: c.name, source }, since: Date.now(), timeoutMs: durationMs(c.sdsConfig.initialFetchTimeout, DEFAULT_INITIAL_FETCH_TIMEOUT_MS) });
      this.subscriber?.({ name: c.name, source });
    }
    return { name: c.name, source };
  }

  get(ref: SecretRef): Secret | undefined {
    return ref.source ? this.dynamic.get(ref.name)?.secret : this.statics.get(ref.name);
  }

  /** Dynamic names requested so far, by source (to resubscribe a new stream). */
  requested(): SecretRef[] {
    return [...this.requests.values()].map((r) => r.ref);
  }

  /** Of these references, the dynamic secrets that have not arrived yet. */
  missing(refs: Iterable<SecretRef>): string[] {
    const out = new Set<string>();
    for (const r of refs) if (r.source && !this.dynamic.has(r.name)) out.add(r.name);
    return [...out];
  }

  /**
   * How long warming may still wait for these missing names (their initial_fetch_timeout since
   * first requested); undefined when one of them waits indefinitely.
   */
  remainingWaitMs(names: readonly string[]): number | undefined {
    let most = 0;
    for (const n of names) {
      const r = this.requests.get(n);
      if (!r) continue;
      if (r.timeoutMs === 0) return undefined;
      most = Math.max(most, r.since + r.timeoutMs - Date.now());
    }
    return Math.max(0, most);
  }

  /** Requested secrets still missing within their initial fetch timeout (readiness waits for them). */
  pending(): string[] {
    const now = Date.now();
    return [...this.requests.values()].filter((r) => !this.dynamic.has(r.ref.name) && (r.timeoutMs === 0 || now < r.since + r.timeoutMs)).map((r) => r.ref.name);
  }

  /**
   * An SDS update as the whole set to apply: secrets are keyed by name whichever stream brought
   * them, so an update adds to (or replaces) what is held rather than removing the others.
   */
  merged(u: AdsUpdate): AdsUpdate {
    const resources = new Map<string, AdsResource>();
    for (const [name, d] of this.dynamic) resources.set(name, { name, any: pack(SecretSchema, d.secret), message: d.secret as Message });
    for (const [name, r] of u.resources) resources.set(name, r);
    return { ...u, resources };
  }

  /** Applies a whole set of dynamic secrets (an update made by `merged`); unchanged ones keep their version. */
  apply(u: AdsUpdate): void {
    const next = new Map<string, DynamicSecret>();
    const now = new Date();
    for (const [name, r] of u.resources) {
      const secret = r.message as unknown as Secret;
      if (secret.$typeName !== SecretSchema.typeName) throw new ConfigError(`secret ${name}`, `expected ${SecretSchema.typeName}, got ${secret.$typeName}`);
      const old = this.dynamic.get(name);
      const same = old && Buffer.from(pack(SecretSchema, old.secret).value).equals(Buffer.from(r.any.value));
      next.set(name, same ? old : { secret, version: u.version, lastUpdated: now });
    }
    this.dynamic = next;
    this.generation++;
    for (const l of this.listeners) l();
  }

  /** Calls `fn` after every applied update; returns the unsubscribe. */
  onChange(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** config_dump's SecretsConfigDump, private keys and other secret material redacted as Envoy does. */
  dump(): SecretsConfigDump {
    return create(SecretsConfigDumpSchema, {
      staticSecrets: [...this.statics.values()].map((s) => ({ name: s.name, secret: pack(SecretSchema, redacted(s)) })),
      dynamicActiveSecrets: [...this.dynamic.entries()].map(([name, d]) => ({ name, versionInfo: d.version, lastUpdated: timestampFromDate(d.lastUpdated), secret: pack(SecretSchema, redacted(d.secret)) })),
      dynamicWarmingSecrets: this.pending().map((name) => ({ name })),
    });
  }
}

const REDACTED = create(DataSourceSchema, { specifier: { case: 'inlineBytes', value: Buffer.from('[redacted]') } });

/** The secret with its sensitive fields (private key, password, session ticket keys, generic secret) replaced. */
function redacted(s: Secret): Secret {
  const t = s.type;
  switch (t.case) {
    case 'tlsCertificate':
      return create(SecretSchema, {
        name: s.name,
        type: { case: 'tlsCertificate', value: { ...t.value, ...(t.value.privateKey ? { privateKey: REDACTED } : {}), ...(t.value.password ? { password: REDACTED } : {}) } },
      });
    case 'sessionTicketKeys':
      return create(SecretSchema, { name: s.name, type: { case: 'sessionTicketKeys', value: { keys: t.value.keys.map(() => REDACTED) } } });
    case 'genericSecret':
      return create(SecretSchema, { name: s.name, type: { case: 'genericSecret', value: { secret: REDACTED } } });
    default:
      return s;
  }
}
