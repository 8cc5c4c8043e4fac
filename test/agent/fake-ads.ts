// A tiny ADS server for the agent's tests: each stream's requests are awaited in order and the
// test answers with whatever responses it wants (no generators, no protocol logic of its own).
import { create } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { Server, ServerCredentials, status, type ServerDuplexStream } from '@grpc/grpc-js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import { DiscoveryResponseSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { grpcServiceDefinition } from '../../src/envoy/grpc-service.js';

/** Items consumed in arrival order; `next()` rejects once the source ended and nothing is left. */
export class Inbox<T> {
  private readonly items: T[] = [];
  private readonly waiters: Array<{ resolve: (v: T) => void; reject: (e: Error) => void }> = [];
  private endedWith?: string;

  push(item: T): void {
    const w = this.waiters.shift();
    if (w) w.resolve(item);
    else this.items.push(item);
  }

  end(why: string): void {
    if (this.endedWith !== undefined) return;
    this.endedWith = why;
    for (const w of this.waiters.splice(0)) w.reject(new Error(`ended: ${why}`));
  }

  get ended(): boolean {
    return this.endedWith !== undefined;
  }

  next(): Promise<T> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve(item);
    if (this.endedWith !== undefined) return Promise.reject(new Error(`ended: ${this.endedWith}`));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** The next item matching, skipping (and dropping) the others. */
  async nextMatching(pred: (t: T) => boolean): Promise<T> {
    for (;;) {
      const t = await this.next();
      if (pred(t)) return t;
    }
  }
}

export class FakeStream {
  readonly requests = new Inbox<DiscoveryRequest>();
  private seq = 0;

  constructor(readonly call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) {
    call.on('data', (r: DiscoveryRequest) => this.requests.push(r));
    call.on('end', () => this.requests.end('client closed'));
    call.on('error', () => this.requests.end('error'));
    call.on('cancelled', () => this.requests.end('cancelled'));
  }

  /** Sends a response; returns its nonce. */
  respond(init: { typeUrl: string; versionInfo: string; resources: Any[] }): string {
    const nonce = `n${++this.seq}`;
    this.call.write(create(DiscoveryResponseSchema, { typeUrl: init.typeUrl, versionInfo: init.versionInfo, resources: init.resources, nonce }));
    return nonce;
  }

  /** Ends the stream with UNAVAILABLE, as a server going away does. */
  fail(): void {
    this.call.emit('error', { code: status.UNAVAILABLE, details: 'test ended the stream' });
    this.requests.end('server ended');
  }
}

export class FakeAds {
  readonly streams = new Inbox<FakeStream>();
  readonly all: FakeStream[] = [];

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private readonly host: string,
  ) {}

  get address(): string {
    return `${this.host}:${this.port}`;
  }

  /** Starts on host:port (0 = any free port), plaintext unless TLS credentials are given. */
  static async start(port = 0, creds: ServerCredentials = ServerCredentials.createInsecure(), host = '127.0.0.1'): Promise<FakeAds> {
    const server = new Server();
    let self: FakeAds | undefined;
    const pending: FakeStream[] = [];
    server.addService(grpcServiceDefinition(AggregatedDiscoveryService), {
      streamAggregatedResources: (call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) => {
        const s = new FakeStream(call);
        if (self) self.accept(s);
        else pending.push(s);
      },
      deltaAggregatedResources: (call: ServerDuplexStream<unknown, unknown>) => call.emit('error', { code: status.UNIMPLEMENTED, details: 'delta not served' }),
    });
    const bound = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`${host}:${port}`, creds, (e, p) => (e ? reject(e) : resolve(p))),
    );
    self = new FakeAds(server, bound, host);
    for (const s of pending) self.accept(s);
    return self;
  }

  private accept(s: FakeStream): void {
    this.all.push(s);
    this.streams.push(s);
  }

  stop(): void {
    this.server.forceShutdown();
    for (const s of this.all) s.requests.end('server stopped');
    this.streams.end('server stopped');
  }
}
