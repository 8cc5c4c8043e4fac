// What the ADS server sends on a stream: generates a watch's resources, puts the SotW or Delta
// response together from the shared encoded entries (responses.ts), records the delivery, and
// writes it within the send timeout, with the push metrics. The protocol's bookkeeping of replies
// and subscriptions stays in server.ts and connection.ts.
import { status } from '@grpc/grpc-js';
import { counter, histogram } from '../common/metrics.js';
import { scope } from '../common/log.js';
import { shortTypeName } from '../envoy/types.js';
import { ResponseCache, type ResourceSet } from './cache.js';
import type { Connection, Delivery, Watch } from './connection.js';
import { XdsStreamError, type DeliveryObserver, type PushRequest, type ResourceGenerator } from './generator.js';
import { applyDelta, deltaDiff, encodeDelta, encodeSotw, incrementalBase } from './responses.js';
import { responseSize, type ResponseBytes, type ResponseWriter } from './response-writer.js';
import { ResponseSizeGuard, sized } from './size-guard.js';

const log = scope('ads');

export interface ResponseSenderOptions {
  readonly generators: ReadonlyMap<string, ResourceGenerator>;
  readonly deliveries?: DeliveryObserver;
  readonly controlPlaneId?: string;
  /** A send not done after this many ms fails (PILOT_XDS_SEND_TIMEOUT); <= 0 = never. */
  readonly sendTimeoutMs: number;
  readonly sizes: ResponseSizeGuard;
}

export class ResponseSender {
  private readonly nonceEpoch = Date.now().toString(36);
  private nonceSeq = 0;
  /** What responses share across streams (the response tier of the XDS cache, see cache.ts). */
  private readonly responses = new ResponseCache();

  constructor(private readonly opts: ResponseSenderOptions) {}

  /**
   * The watch's current resources, or undefined when the generator failed (nothing is sent). Streams
   * given the same resources share one set (see ResourceSets).
   */
  private async generate(conn: Connection, w: Watch, push?: PushRequest): Promise<ResourceSet | undefined> {
    const generator = this.opts.generators.get(w.typeUrl)!;
    const stamp = this.opts.deliveries?.stamp();
    let generated;
    try {
      generated = await generator.generate({ proxy: conn.proxy, typeUrl: w.typeUrl, subscription: w, push });
    } catch (err) {
      counter('pilot_total_xds_internal_errors').inc();
      counter('pilot_xds_pushes').inc({ type: `${shortTypeName(w.typeUrl)}_builderr` });
      log.error(`generating ${shortTypeName(w.typeUrl)} for ${conn.proxy.connectionId}: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
    const set = this.responses.sets.forSubscription(generated, w);
    if (stamp !== undefined && !conn.closed) this.opts.deliveries?.generated(conn.proxy.connectionId, w.typeUrl, stamp, set.version);
    return set;
  }

  private nextNonce(): string {
    return `${this.nonceEpoch}-${(++this.nonceSeq).toString(36)}`;
  }

  async respondSotw(
    conn: Connection,
    send: (msg: ResponseBytes) => Promise<void>,
    w: Watch,
    force: boolean,
    push?: PushRequest,
  ): Promise<void> {
    const start = performance.now();
    const set = await this.generate(conn, w, push);
    if (!set || conn.closed) return;
    if (!force && w.sent?.version === set.version) return;
    const delivery: Delivery = { version: set.version, nonce: this.nextNonce(), time: new Date(), resources: set.resources };
    const since = push ? incrementalBase(w) : undefined;
    const encoded = encodeSotw(this.responses, w.typeUrl, delivery, since, this.controlPlane());
    if (!this.opts.sizes.admit(conn.proxy, w.typeUrl, set.version, responseSize(encoded), () => sized(set.resources.values()))) return;
    w.sent = delivery;
    this.opts.deliveries?.sent(conn.proxy.connectionId, w.typeUrl, delivery.nonce, delivery.version);
    await this.sendTimed(conn, w.typeUrl, start, () => send(encoded));
  }

  async respondDelta(
    conn: Connection,
    send: (msg: ResponseBytes) => Promise<void>,
    w: Watch,
    force: boolean,
    push: PushRequest | undefined,
    added: readonly string[],
  ): Promise<void> {
    const start = performance.now();
    const set = await this.generate(conn, w, push);
    if (!set || conn.closed) return;
    const diff = deltaDiff(w, set, added, force);
    if (!diff) return;
    const nonce = this.nextNonce();
    const head = { systemVersionInfo: set.version, typeUrl: w.typeUrl, nonce, removedResources: [...diff.removed, ...diff.missing], controlPlane: this.controlPlane() };
    const encoded = encodeDelta(this.responses, head, set, diff.updated);
    if (!this.opts.sizes.admit(conn.proxy, w.typeUrl, set.version, responseSize(encoded), () => sized(diff.updated))) return;
    const delivery: Delivery = { version: set.version, nonce, time: new Date(), resources: applyDelta(w, set, diff) };
    w.sent = delivery;
    w.pending.set(delivery.nonce, delivery);
    this.opts.deliveries?.sent(conn.proxy.connectionId, w.typeUrl, delivery.nonce, delivery.version);
    await this.sendTimed(conn, w.typeUrl, start, () => send(encoded));
  }

  private controlPlane(): { identifier: string } | undefined {
    return this.opts.controlPlaneId === undefined ? undefined : { identifier: this.opts.controlPlaneId };
  }

  /** Sends with metrics; a failed send ends the stream (the proxy reconnects and resyncs). */
  private async sendTimed(conn: Connection, typeUrl: string, start: number, doSend: () => Promise<void>): Promise<void> {
    const type = shortTypeName(typeUrl);
    const sendStart = performance.now();
    try {
      await doSend();
    } catch (err) {
      counter('pilot_xds_pushes').inc({ type: `${type}_senderr` });
      throw err;
    }
    const end = performance.now();
    histogram('pilot_xds_send_time').observe((end - sendStart) / 1000);
    histogram('pilot_xds_push_time').observe({ type }, (end - start) / 1000);
    counter('pilot_xds_pushes').inc({ type });
    log.debug(`${conn.proxy.connectionId}: sent ${type}`);
  }

  /** Writes one response; resolves once gRPC has taken it, or rejects after the send timeout. */
  write(writer: ResponseWriter, msg: ResponseBytes): Promise<void> {
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      if (this.opts.sendTimeoutMs > 0) {
        timer = setTimeout(() => {
          counter('pilot_xds_write_timeout').inc();
          reject(new XdsStreamError(status.DEADLINE_EXCEEDED, `send did not complete within ${this.opts.sendTimeoutMs}ms`));
        }, this.opts.sendTimeoutMs);
      }
      writer(msg, (err) => {
        clearTimeout(timer);
        if (err) reject(err);
        else resolve();
      });
    });
  }
}
