// The simulated proxies' reader of an ADS response stream: gRPC length-prefixed frames, each a
// DiscoveryResponse or DeltaDiscoveryResponse, parsed as the DATA chunks arrive. It keeps only
// what a proxy needs to ACK (version, type URL, nonce) and counts resources; the resources' bytes
// are stepped over where they lie, never copied or joined, so one simulated proxy costs a walk over
// the top-level fields instead of a whole-message buffer per response. A response is reported only
// once its last byte has arrived.

/** The top-level fields a proxy ACKs with: the same numbers in both response types. */
export interface ResponseHead {
  /** version_info (DiscoveryResponse) or system_version_info (DeltaDiscoveryResponse): field 1. */
  version: string;
  /** Field 4. */
  typeUrl: string;
  /** Field 5. */
  nonce: string;
  /** Occurrences of field 2 (`resources` in both response types). */
  resources: number;
}

const VERSION = 1;
const RESOURCES = 2;
const TYPE_URL = 4;
const NONCE = 5;

const enum Wire {
  Varint = 0,
  Fixed64 = 1,
  Delimited = 2,
  StartGroup = 3,
  EndGroup = 4,
  Fixed32 = 5,
}

const enum State {
  /** Collecting the 5-byte gRPC prefix (compressed flag, big-endian length). */
  Prefix,
  /** Reading a field's tag varint. */
  Tag,
  /** Reading the length varint of a delimited field. */
  Length,
  /** Reading (and dropping) a varint value. */
  VarintValue,
  /** Stepping over `skip` bytes. */
  Skip,
  /** Collecting the bytes of a kept string field. */
  Keep,
}

const MAX_VARINT_BYTES = 10;

export class ResponseStreamError extends Error {}

export class ResponseReader {
  private state = State.Prefix;
  private readonly prefix = Buffer.alloc(5);
  private prefixLength = 0;
  /** Bytes of the current message not yet consumed. */
  private remaining = 0;
  private head = emptyHead();
  private varint = 0;
  private varintBytes = 0;
  private field = 0;
  private skip = 0;
  private keep: Buffer[] = [];
  /** Field numbers of the groups being stepped over, innermost last. */
  private readonly groups: number[] = [];

  /** `onResponse` runs once per whole response, in order. */
  constructor(private readonly onResponse: (head: ResponseHead) => void) {}

  /** Feeds the next DATA chunk; throws a ResponseStreamError on a malformed stream. */
  push(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.state === State.Prefix) {
        const n = Math.min(5 - this.prefixLength, chunk.length - i);
        chunk.copy(this.prefix, this.prefixLength, i, i + n);
        this.prefixLength += n;
        i += n;
        if (this.prefixLength === 5) this.startMessage();
        continue;
      }
      // Every other state lies inside a message: never read past its end.
      const end = i + Math.min(this.remaining, chunk.length - i);
      i = this.state === State.Skip || this.state === State.Keep ? this.take(chunk, i, end) : this.readVarint(chunk, i, end);
      if (this.remaining === 0) this.endMessage();
    }
  }

  /** The stream ended (trailers or end of stream): a response cut short is an error. */
  end(): void {
    if (this.state !== State.Prefix || this.prefixLength !== 0) throw new ResponseStreamError('the stream ended in the middle of a response');
  }

  private startMessage(): void {
    if (this.prefix[0] !== 0) throw new ResponseStreamError(`compressed gRPC frame (flag ${this.prefix[0]}): the simulated proxies ask for no compression`);
    this.prefixLength = 0;
    this.remaining = this.prefix.readUInt32BE(1);
    this.head = emptyHead();
    this.state = State.Tag;
    this.resetVarint();
    if (this.remaining === 0) this.endMessage();
  }

  private endMessage(): void {
    if (this.varintBytes > 0) throw new ResponseStreamError(`truncated varint at the end of a ${this.messageName()}`);
    if (this.state !== State.Tag) throw new ResponseStreamError(`a ${this.messageName()} ends inside field ${this.field}`);
    if (this.groups.length) throw new ResponseStreamError(`a ${this.messageName()} ends inside group ${this.groups[this.groups.length - 1]}`);
    this.state = State.Prefix;
    this.onResponse(this.head);
  }

  private messageName(): string {
    return this.head.typeUrl ? `response of ${this.head.typeUrl}` : 'response';
  }

  /** Skip or Keep: consumes up to `end` (within the message), returns the new index. */
  private take(chunk: Buffer, i: number, end: number): number {
    const n = Math.min(this.skip, end - i);
    if (this.state === State.Keep) this.keep.push(chunk.subarray(i, i + n));
    this.skip -= n;
    this.remaining -= n;
    if (this.skip === 0) this.fieldDone();
    return i + n;
  }

  /** Tag, Length or VarintValue: reads varint bytes up to `end` (within the message), returns the new index. */
  private readVarint(chunk: Buffer, i: number, end: number): number {
    while (i < end) {
      const b = chunk[i++]!;
      this.remaining--;
      if (this.varintBytes === MAX_VARINT_BYTES - 1 && b > 1) throw new ResponseStreamError(`varint longer than 64 bits in a ${this.messageName()}`);
      this.varint += (b & 0x7f) * 2 ** (7 * this.varintBytes++);
      if (b & 0x80) continue;
      const value = this.varint;
      this.resetVarint();
      this.onVarint(value);
      return i;
    }
    return i;
  }

  private onVarint(value: number): void {
    switch (this.state) {
      case State.Tag:
        return this.onTag(value);
      case State.Length:
        return this.onLength(value);
      default:
        return this.fieldDone();
    }
  }

  private onTag(tag: number): void {
    this.field = Math.floor(tag / 8);
    const wire = tag % 8;
    if (this.field === 0) throw new ResponseStreamError(`field number 0 in a ${this.messageName()}`);
    switch (wire) {
      case Wire.Varint:
        this.state = State.VarintValue;
        return;
      case Wire.Fixed64:
        return this.skipBytes(8);
      case Wire.Fixed32:
        return this.skipBytes(4);
      case Wire.Delimited:
        this.state = State.Length;
        return;
      case Wire.StartGroup:
        this.groups.push(this.field);
        return;
      case Wire.EndGroup:
        if (this.groups.pop() !== this.field) throw new ResponseStreamError(`unmatched end of group ${this.field} in a ${this.messageName()}`);
        return;
      default:
        throw new ResponseStreamError(`wire type ${wire} (field ${this.field}) in a ${this.messageName()}`);
    }
  }

  private onLength(length: number): void {
    if (length > this.remaining) throw new ResponseStreamError(`field ${this.field} (${length} bytes) runs past the end of its ${this.messageName()}`);
    const top = this.groups.length === 0;
    if (top && this.field === RESOURCES) this.head.resources++;
    const kept = top && (this.field === VERSION || this.field === TYPE_URL || this.field === NONCE);
    if (kept && length === 0) this.setKept('');
    if (length === 0) {
      this.state = State.Tag;
      return;
    }
    this.skip = length;
    this.state = kept ? State.Keep : State.Skip;
  }

  private skipBytes(n: number): void {
    this.skip = n;
    this.state = State.Skip;
  }

  private fieldDone(): void {
    if (this.state === State.Keep) {
      // A string split across DATA chunks is the only join, and these strings are short.
      this.setKept((this.keep.length === 1 ? this.keep[0]! : Buffer.concat(this.keep)).toString('utf8'));
      this.keep = [];
    }
    this.state = State.Tag;
  }

  private setKept(text: string): void {
    if (this.field === VERSION) this.head.version = text;
    else if (this.field === TYPE_URL) this.head.typeUrl = text;
    else this.head.nonce = text;
  }

  private resetVarint(): void {
    this.varint = 0;
    this.varintBytes = 0;
  }
}

function emptyHead(): ResponseHead {
  return { version: '', typeUrl: '', nonce: '', resources: 0 };
}
