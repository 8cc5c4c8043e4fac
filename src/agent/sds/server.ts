// The agent's SDS server: Envoy's SecretDiscoveryService (State of the World, Delta and Fetch) on a
// local Unix socket, serving the workload secret `default` (key + chain), the trust bundle
// `ROOTCA` and the operating system's roots `file-root:system` (system-roots.ts) as
// envoy.extensions.transport_sockets.tls.v3.Secret. A renewed certificate is pushed
// on the open streams; the proxy's NACKs are counted, not retried. A stream is stale while the
// certificate its proxy last accepted is not the current one (a push not yet ACKed, or NACKed).
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync, watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Server, ServerCredentials, type ServerDuplexStream, type ServerUnaryCall, type sendUnaryData } from '@grpc/grpc-js';
import { scope } from '../../common/log.js';
import { counter, gauge } from '../../common/metrics.js';
import { SecretSchema } from '../../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import {
  DeltaDiscoveryResponseSchema,
  DiscoveryResponseSchema,
  type DeltaDiscoveryRequest,
  type DeltaDiscoveryResponse,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from '../../gen/envoy/service/discovery/v3/discovery_pb.js';
import { SecretDiscoveryService } from '../../gen/envoy/service/secret/v3/sds_pb.js';
import { grpcServiceDefinition } from '../../envoy/grpc-service.js';
import { pack, TypeUrl } from '../../envoy/types.js';
import type { FederatedBundles } from '../../security/federation/bundle-fetcher.js';
import { ROOT_SECRET, WORKLOAD_SECRET, type SecretManager, type WorkloadSecret } from './secret-manager.js';
import { readSystemRoots, SYSTEM_ROOT_SECRET, type SystemRoots } from './system-roots.js';

const log = scope('sds');

/** Where the proxy finds the SDS server, under the agent's work directory (DESIGN.md). */
export const SDS_SOCKET_PATH = './var/run/secrets/workload-spiffe-uds/socket';

type SecretInit = MessageInitShape<typeof SecretSchema>;

const bytes = (text: string) => ({ specifier: { case: 'inlineBytes' as const, value: Buffer.from(text) } });

/** A validation-context Secret trusting the roots of `pem`. */
function rootsResource(name: string, pem: string): SecretInit {
  return { name, type: { case: 'validationContext', value: { trustedCa: bytes(pem) } } };
}

/**
 * The Secret resource of `name` for the current workload secret; undefined for a name we do not
 * serve. `federatedPem`: roots of other trust domains (SPIFFE_BUNDLE_ENDPOINTS), trusted beside ours.
 */
export function secretResource(name: string, s: WorkloadSecret, federatedPem = ''): SecretInit | undefined {
  if (name === WORKLOAD_SECRET) {
    return { name, type: { case: 'tlsCertificate', value: { certificateChain: bytes(s.chainPem), privateKey: bytes(s.keyPem) } } };
  }
  // A root file may lack its final newline: glued to the next PEM block, OpenSSL would read only the first.
  const trusted = federatedPem ? `${s.rootPem.trimEnd()}\n${federatedPem}` : s.rootPem;
  if (name === ROOT_SECRET) return rootsResource(name, trusted);
  return undefined;
}

function versionOf(r: SecretInit): string {
  const v = r.type?.value as { certificateChain?: { specifier?: { value?: unknown } }; trustedCa?: { specifier?: { value?: unknown } } } | undefined;
  const content = v?.certificateChain?.specifier?.value ?? v?.trustedCa?.specifier?.value;
  return createHash('sha256').update(content instanceof Uint8Array ? content : '').digest('hex').slice(0, 16);
}

interface Stream {
  readonly names: Set<string>;
  /** Versions last sent per name (Delta sends only what changed). */
  readonly sent: Map<string, string>;
  /** The `default` version in the response awaiting the proxy's ACK, by its nonce. */
  pending?: { nonce: string; version: string | undefined };
  /** The `default` version the proxy last ACKed. */
  held?: string;
  push(): void;
}

export class SdsServer {
  private readonly grpc = new Server();
  private readonly streams = new Set<Stream>();
  private nonce = 0;
  /** The system roots once read (an Error: SSL_CERT_FILE unreadable, the secret is not served). */
  private systemRoots?: SystemRoots | Error;
  private systemRootsWatcher?: FSWatcher;

  constructor(
    private readonly secrets: SecretManager,
    readonly socketPath: string,
    private readonly federated?: FederatedBundles,
    private readonly readRoots: () => SystemRoots = readSystemRoots,
  ) {
    this.grpc.addService(grpcServiceDefinition(SecretDiscoveryService), {
      streamSecrets: (call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) => this.serveSotw(call),
      deltaSecrets: (call: ServerDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>) => this.serveDelta(call),
      fetchSecrets: (call: ServerUnaryCall<DiscoveryRequest, DiscoveryResponse>, done: sendUnaryData<DiscoveryResponse>) => done(null, this.sotwResponse(call.request.resourceNames)),
    });
    secrets.on('update', () => {
      for (const s of this.streams) s.push();
      this.countStale();
    });
    federated?.on('update', () => {
      for (const s of this.streams) s.push();
    });
  }

  /** Binds the Unix socket (a stale socket file from an earlier run is removed first). */
  async start(): Promise<void> {
    mkdirSync(dirname(this.socketPath), { recursive: true });
    rmSync(this.socketPath, { force: true });
    await new Promise<void>((resolve, reject) =>
      this.grpc.bindAsync(`unix:${this.socketPath}`, ServerCredentials.createInsecure(), (err) => (err ? reject(new Error(`SDS: cannot listen on ${this.socketPath}: ${err.message}`)) : resolve())),
    );
    log.info(`SDS server listening on ${this.socketPath}`);
  }

  close(): void {
    this.grpc.forceShutdown();
    gauge('total_active_connections').dec(this.streams.size);
    this.streams.clear();
    this.countStale();
    this.systemRootsWatcher?.close();
    rmSync(this.socketPath, { force: true });
  }

  private resources(names: Iterable<string>): SecretInit[] {
    const s = this.secrets.secret;
    return [...names]
      .map((n) => (n === SYSTEM_ROOT_SECRET ? this.systemRootsResource() : s ? secretResource(n, s, this.federated?.pem) : undefined))
      .filter((r): r is SecretInit => r !== undefined);
  }

  /** `file-root:system`, read on its first request; unreadable, it is never served (what needs it does not connect). */
  private systemRootsResource(): SecretInit | undefined {
    if (!this.systemRoots) {
      try {
        this.systemRoots = this.readRoots();
        if (this.systemRoots.source === 'node') log.warn(`no operating system CA bundle found; ${SYSTEM_ROOT_SECRET} serves the roots bundled with Node.js`);
        else {
          log.info(`${SYSTEM_ROOT_SECRET} serves the CA bundle ${this.systemRoots.source}`);
          this.watchSystemRoots(this.systemRoots.source);
        }
      } catch (e) {
        this.systemRoots = e as Error;
        log.error(`${SYSTEM_ROOT_SECRET} cannot be served: ${this.systemRoots.message}`);
      }
    }
    return this.systemRoots instanceof Error ? undefined : rootsResource(SYSTEM_ROOT_SECRET, this.systemRoots.pem);
  }

  /**
   * A bundle rewritten (by the distribution's update tool, usually a rename into place, hence the
   * directory is watched) is pushed; an unreadable one keeps the last good roots.
   */
  private watchSystemRoots(path: string): void {
    this.systemRootsWatcher = watch(dirname(path), (_event, name) => {
      if (name !== basename(path)) return;
      let next: SystemRoots;
      try {
        next = this.readRoots();
      } catch (e) {
        log.warn(`${SYSTEM_ROOT_SECRET}: ${(e as Error).message}; keeping the roots read before`);
        return;
      }
      if (this.systemRoots instanceof Error || next.pem === this.systemRoots?.pem) return;
      this.systemRoots = next;
      log.info(`${SYSTEM_ROOT_SECRET}: ${next.source} changed; pushed`);
      for (const s of this.streams) if (s.names.has(SYSTEM_ROOT_SECRET)) s.push();
    });
    this.systemRootsWatcher.unref();
  }

  private currentDefault(): string | undefined {
    return this.resources([WORKLOAD_SECRET]).map(versionOf)[0];
  }

  /** Streams subscribed to `default` whose proxy holds an older certificate than the current one. */
  private countStale(): void {
    const current = this.currentDefault();
    let stale = 0;
    for (const s of this.streams) if (s.names.has(WORKLOAD_SECRET) && s.held !== undefined && s.held !== current) stale++;
    gauge('total_stale_connections').set(stale);
  }

  /** Remembers what a response carries so that its ACK tells which certificate the proxy holds. */
  private awaitAck(stream: Stream, nonce: string, resources: readonly SecretInit[]): void {
    const d = resources.find((r) => r.name === WORKLOAD_SECRET);
    // A Delta response without `default` does not change what an ACK tells about it.
    stream.pending = { nonce, version: d ? versionOf(d) : stream.pending?.version };
  }

  /** An ACK of the pending response: its `default` is now what the proxy holds. */
  private acked(stream: Stream, nonce: string): void {
    if (stream.pending?.nonce !== nonce) return;
    if (stream.pending.version !== undefined) stream.held = stream.pending.version;
    stream.pending = undefined;
    this.countStale();
  }

  private sotwResponse(names: readonly string[]): DiscoveryResponse {
    const resources = this.resources(names);
    return create(DiscoveryResponseSchema, {
      versionInfo: resources.map(versionOf).join('.'),
      typeUrl: TypeUrl.Secret,
      nonce: String(++this.nonce),
      resources: resources.map((r) => pack(SecretSchema, create(SecretSchema, r))),
    });
  }

  /** Writes a response, counting it as a push (or a failed one). */
  private send<T>(call: ServerDuplexStream<unknown, T>, msg: T): void {
    try {
      call.write(msg);
      counter('total_pushes').inc();
    } catch (e) {
      counter('total_push_errors').inc();
      log.warn(`SDS push failed: ${(e as Error).message}`);
    }
  }

  private track(call: ServerDuplexStream<unknown, unknown>, stream: Stream): void {
    this.streams.add(stream);
    gauge('total_active_connections').inc();
    const end = (): void => {
      if (!this.streams.delete(stream)) return;
      gauge('total_active_connections').dec();
      this.countStale();
    };
    call.on('end', () => {
      end();
      call.end();
    });
    call.on('cancelled', end);
    call.on('error', end);
  }

  private nack(error: { message: string } | undefined, names: Iterable<string>): boolean {
    if (!error) return false;
    counter('total_secret_update_failures').inc();
    log.warn(`the proxy rejected secrets ${[...names].join(', ')}: ${error.message}`);
    return true;
  }

  private serveSotw(call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>): void {
    const stream: Stream = {
      names: new Set(),
      sent: new Map(),
      push: () => {
        const res = this.sotwResponse([...stream.names]);
        this.awaitAck(stream, res.nonce, this.resources(stream.names));
        this.send(call, res);
      },
    };
    this.track(call, stream);
    call.on('data', (req: DiscoveryRequest) => {
      if (req.typeUrl && req.typeUrl !== TypeUrl.Secret) {
        call.emit('error', { code: 3, details: `SDS serves ${TypeUrl.Secret} only, not ${req.typeUrl}` });
        return;
      }
      if (this.nack(req.errorDetail, req.resourceNames)) return;
      if (req.responseNonce) this.acked(stream, req.responseNonce);
      const changed = req.resourceNames.length !== stream.names.size || req.resourceNames.some((n) => !stream.names.has(n));
      stream.names.clear();
      for (const n of req.resourceNames) stream.names.add(n);
      // An ACK of what we sent needs no answer; a new or changed subscription does.
      if (req.responseNonce === '' || changed) stream.push();
    });
  }

  private serveDelta(call: ServerDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>): void {
    const stream: Stream = {
      names: new Set(),
      sent: new Map(),
      push: () => {
        const fresh = this.resources(stream.names).filter((r) => stream.sent.get(r.name!) !== versionOf(r));
        if (fresh.length === 0) return;
        for (const r of fresh) stream.sent.set(r.name!, versionOf(r));
        const nonce = String(++this.nonce);
        this.awaitAck(stream, nonce, fresh);
        this.send(
          call,
          create(DeltaDiscoveryResponseSchema, {
            typeUrl: TypeUrl.Secret,
            nonce,
            resources: fresh.map((r) => ({ name: r.name!, version: versionOf(r), resource: pack(SecretSchema, create(SecretSchema, r)) })),
          }),
        );
      },
    };
    this.track(call, stream);
    call.on('data', (req: DeltaDiscoveryRequest) => {
      if (this.nack(req.errorDetail, stream.names)) return;
      if (req.responseNonce) this.acked(stream, req.responseNonce);
      for (const [n, v] of Object.entries(req.initialResourceVersions)) stream.sent.set(n, v);
      for (const n of req.resourceNamesSubscribe) stream.names.add(n);
      for (const n of req.resourceNamesUnsubscribe) {
        stream.names.delete(n);
        stream.sent.delete(n);
      }
      stream.push();
    });
  }
}
