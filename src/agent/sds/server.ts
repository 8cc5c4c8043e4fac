// The agent's SDS server: Envoy's SecretDiscoveryService (State of the World, Delta and Fetch) on a
// local Unix socket, serving the workload secret `default` (key + chain) and the trust bundle
// `ROOTCA` as envoy.extensions.transport_sockets.tls.v3.Secret. A renewed certificate is pushed
// on the open streams; the proxy's NACKs are counted, not retried.
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Server, ServerCredentials, type ServerDuplexStream, type ServerUnaryCall, type sendUnaryData } from '@grpc/grpc-js';
import { scope } from '../../common/log.js';
import { counter } from '../../common/metrics.js';
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
import { ROOT_SECRET, WORKLOAD_SECRET, type SecretManager, type WorkloadSecret } from './secret-manager.js';

const log = scope('sds');

/** Where the proxy finds the SDS server, under the agent's work directory (DESIGN.md). */
export const SDS_SOCKET_PATH = './var/run/secrets/workload-spiffe-uds/socket';

type SecretInit = MessageInitShape<typeof SecretSchema>;

/** The Secret resource of `name` for the current workload secret; undefined for a name we do not serve. */
export function secretResource(name: string, s: WorkloadSecret): SecretInit | undefined {
  const bytes = (text: string) => ({ specifier: { case: 'inlineBytes' as const, value: Buffer.from(text) } });
  if (name === WORKLOAD_SECRET) {
    return { name, type: { case: 'tlsCertificate', value: { certificateChain: bytes(s.chainPem), privateKey: bytes(s.keyPem) } } };
  }
  if (name === ROOT_SECRET) return { name, type: { case: 'validationContext', value: { trustedCa: bytes(s.rootPem) } } };
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
  push(): void;
}

export class SdsServer {
  private readonly grpc = new Server();
  private readonly streams = new Set<Stream>();
  private nonce = 0;

  constructor(
    private readonly secrets: SecretManager,
    readonly socketPath: string,
  ) {
    this.grpc.addService(grpcServiceDefinition(SecretDiscoveryService), {
      streamSecrets: (call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) => this.serveSotw(call),
      deltaSecrets: (call: ServerDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>) => this.serveDelta(call),
      fetchSecrets: (call: ServerUnaryCall<DiscoveryRequest, DiscoveryResponse>, done: sendUnaryData<DiscoveryResponse>) => done(null, this.sotwResponse(call.request.resourceNames)),
    });
    secrets.on('update', () => {
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
    this.streams.clear();
    rmSync(this.socketPath, { force: true });
  }

  private resources(names: Iterable<string>): SecretInit[] {
    const s = this.secrets.secret;
    if (!s) return [];
    return [...names].map((n) => secretResource(n, s)).filter((r): r is SecretInit => r !== undefined);
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
    counter('total_active_connections').inc();
    const end = (): void => {
      this.streams.delete(stream);
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
      push: () => this.send(call, this.sotwResponse([...stream.names])),
    };
    this.track(call, stream);
    call.on('data', (req: DiscoveryRequest) => {
      if (req.typeUrl && req.typeUrl !== TypeUrl.Secret) {
        call.emit('error', { code: 3, details: `SDS serves ${TypeUrl.Secret} only, not ${req.typeUrl}` });
        return;
      }
      if (this.nack(req.errorDetail, req.resourceNames)) return;
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
        this.send(
          call,
          create(DeltaDiscoveryResponseSchema, {
            typeUrl: TypeUrl.Secret,
            nonce: String(++this.nonce),
            resources: fresh.map((r) => ({ name: r.name!, version: versionOf(r), resource: pack(SecretSchema, create(SecretSchema, r)) })),
          }),
        );
      },
    };
    this.track(call, stream);
    call.on('data', (req: DeltaDiscoveryRequest) => {
      if (this.nack(req.errorDetail, stream.names)) return;
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
