// Test harness for the xDS server: a fixture generator, a server on 127.0.0.1:0, and ADS clients
// whose responses and final status are awaited in order (no timers: a test waits for a message or
// a status, never for time to pass).
import { create, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import { credentials, type ClientDuplexStream, type Client, type Metadata, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import {
  DeltaDiscoveryRequestSchema,
  DiscoveryRequestSchema,
  type DeltaDiscoveryRequest,
  type DeltaDiscoveryResponse,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import type { Counter, Gauge } from 'prom-client';
import { counter, gauge, type CounterName, type GaugeName } from '../../src/common/metrics.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { GenerateRequest, ResourceGenerator, XdsResource } from '../../src/xds/generator.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { XdsServer, type XdsServerOptions } from '../../src/xds/server.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';

// Connection lines would drown the test report; warnings (NACKs, closed streams) still show.
setScopeLevel('ads', 'warn');

/** Resources by type URL and name, editable by tests; records every generate call. */
export class FixtureGenerator {
  private readonly store = new Map<string, Map<string, XdsResource>>();
  readonly calls: GenerateRequest[] = [];
  /** Set to make generate throw (a generator bug). */
  failWith?: Error;

  set<Desc extends DescMessage>(typeUrl: string, schema: Desc, init: MessageInitShape<Desc> & { name: string }): void {
    this.set0(typeUrl, { name: init.name, resource: pack(schema, init) });
  }

  /** For ClusterLoadAssignment, whose name field is cluster_name. */
  setNamed<Desc extends DescMessage>(typeUrl: string, name: string, schema: Desc, init: MessageInitShape<Desc>): void {
    this.set0(typeUrl, { name, resource: pack(schema, init) });
  }

  delete(typeUrl: string, name: string): void {
    this.store.get(typeUrl)?.delete(name);
  }

  private set0(typeUrl: string, r: XdsResource): void {
    let byName = this.store.get(typeUrl);
    if (!byName) this.store.set(typeUrl, (byName = new Map()));
    byName.set(r.name, r);
  }

  generatorFor(typeUrl: string): ResourceGenerator {
    return {
      generate: (req) => {
        this.calls.push(req);
        if (this.failWith) throw this.failWith;
        return [...(this.store.get(typeUrl)?.values() ?? [])];
      },
    };
  }

  /** A generator per xDS type: LDS, RDS, CDS, EDS. */
  generators(): ReadonlyMap<string, ResourceGenerator> {
    return new Map(
      [TypeUrl.Listener, TypeUrl.RouteConfiguration, TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment].map((t) => [
        t,
        this.generatorFor(t),
      ]),
    );
  }
}

export interface Harness {
  readonly server: XdsServer;
  readonly address: string;
  readonly fixtures: FixtureGenerator;
  /** A new client (its own channel) to the server, or to another of its addresses; closed by close(). */
  client(address?: string): AdsClient;
  close(): void;
}

export async function startServer(options: Partial<XdsServerOptions> = {}): Promise<Harness> {
  const fixtures = new FixtureGenerator();
  const server = new XdsServer({ generators: fixtures.generators(), ...options });
  const address = `127.0.0.1:${await server.listen('127.0.0.1:0')}`;
  const clients: Client[] = [];
  return {
    server,
    fixtures,
    address,
    client: (other?: string) => {
      const c = adsClient(other ?? address);
      clients.push(c);
      return c;
    },
    close: () => {
      for (const c of clients) c.close();
      server.close();
    },
  };
}

/** Messages of one stream, consumed in arrival order, plus the stream's final status. */
class Inbox<T> {
  private readonly items: T[] = [];
  private readonly waiters: Array<{ resolve: (v: T) => void; reject: (e: Error) => void }> = [];
  private ended?: StatusObject;
  private endWaiters: Array<(s: StatusObject) => void> = [];

  push(item: T): void {
    const w = this.waiters.shift();
    if (w) w.resolve(item);
    else this.items.push(item);
  }

  end(status: StatusObject): void {
    if (this.ended) return;
    this.ended = status;
    for (const w of this.waiters.splice(0)) w.reject(new Error(`stream ended (${status.code}): ${status.details}`));
    for (const w of this.endWaiters.splice(0)) w(status);
  }

  next(): Promise<T> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve(item);
    if (this.ended) return Promise.reject(new Error(`stream ended (${this.ended.code}): ${this.ended.details}`));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  status(): Promise<StatusObject> {
    if (this.ended) return Promise.resolve(this.ended);
    return new Promise((resolve) => this.endWaiters.push(resolve));
  }

  get pending(): number {
    return this.items.length;
  }
}

/** A bidi stream with typed send/next; `status()` resolves when the server ends it. */
export class TestStream<ReqDesc extends DescMessage, Res> {
  private readonly inbox = new Inbox<Res>();

  constructor(
    private readonly call: ClientDuplexStream<MessageShape<ReqDesc>, Res>,
    private readonly schema: ReqDesc,
  ) {
    call.on('data', (r: Res) => this.inbox.push(r));
    call.on('status', (s: StatusObject) => this.inbox.end(s));
    // The 'status' event carries the outcome; without an 'error' listener an error status throws.
    call.on('error', (e: ServiceError) => this.inbox.end({ code: e.code, details: e.details, metadata: e.metadata }));
  }

  send(init: MessageInitShape<ReqDesc>): void {
    this.call.write(create(this.schema, init));
  }

  next(): Promise<Res> {
    return this.inbox.next();
  }

  status(): Promise<StatusObject> {
    return this.inbox.status();
  }

  /** Responses received and not yet consumed. */
  get unread(): number {
    return this.inbox.pending;
  }

  /** Stops reading responses, so HTTP/2 flow control pushes back on the server. */
  pause(): void {
    this.call.pause();
  }

  resume(): void {
    this.call.resume();
  }

  close(): void {
    this.call.cancel();
  }
}

export type SotwStream = TestStream<typeof DiscoveryRequestSchema, DiscoveryResponse>;
export type DeltaStream = TestStream<typeof DeltaDiscoveryRequestSchema, DeltaDiscoveryResponse>;

export interface AdsClient extends Client {
  streamAggregatedResources(metadata?: Metadata): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  deltaAggregatedResources(metadata?: Metadata): ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>;
}

export function adsClient(address: string): AdsClient {
  return grpcClient(AggregatedDiscoveryService, address, credentials.createInsecure()) as AdsClient;
}

/** A SotW stream; `metadata` (an authorization token, say) goes with the call. */
export function sotw(client: AdsClient, metadata?: Metadata): SotwStream {
  return new TestStream(metadata ? client.streamAggregatedResources(metadata) : client.streamAggregatedResources(), DiscoveryRequestSchema);
}

export function delta(client: AdsClient, metadata?: Metadata): DeltaStream {
  return new TestStream(metadata ? client.deltaAggregatedResources(metadata) : client.deltaAggregatedResources(), DeltaDiscoveryRequestSchema);
}

export function node(id: string, metadata: Record<string, string> = { NAMESPACE: 'default' }) {
  return { id, metadata };
}

async function valueOf(m: Counter<string> | Gauge<string>, labels: Record<string, string>): Promise<number> {
  const { values } = await m.get();
  const hit = values.find((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val));
  return hit?.value ?? 0;
}

/** A counter's current value for the given labels (0 when never incremented). */
export function counterValue(name: CounterName, labels: Record<string, string> = {}): Promise<number> {
  return valueOf(counter(name), labels);
}

export function gaugeValue(name: GaugeName, labels: Record<string, string> = {}): Promise<number> {
  return valueOf(gauge(name), labels);
}
