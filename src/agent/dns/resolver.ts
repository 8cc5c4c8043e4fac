// One DNS query in, one answer out: mesh names from the lookup table, everything else from the
// upstream resolvers. Never throws on what a client sends: a message that cannot be read gets
// FORMERR when its header can be, and is dropped otherwise.
import dnsPacket, { type Answer, type DecodedPacket, type Packet } from 'dns-packet';
import { scope } from '../../common/log.js';
import type { DnsForwarder } from './forwarder.js';
import type { LookupTable } from './table.js';

const log = scope('dns');

const RCODE = { FORMERR: 1, SERVFAIL: 2 } as const;
const HEADER_BYTES = 12;
/** Without EDNS a UDP answer may not exceed 512 bytes (RFC 1035); TCP carries up to 64 KiB. */
const UDP_DEFAULT_MAX = 512;

export type Transport = 'udp' | 'tcp';

function opcodeBits(flags: number | undefined): number {
  return (flags ?? 0) & 0x7800;
}

/** An answer carrying only a header: the query's id, opcode and RD bit, and `rcode`. */
function headerOnly(query: Buffer, rcode: number): Buffer {
  const out = Buffer.alloc(HEADER_BYTES);
  query.copy(out, 0, 0, 2);
  // QR set, opcode and RD copied, RA set.
  const flags = 0x8000 | (query.readUInt16BE(2) & 0x7900) | 0x0080 | rcode;
  out.writeUInt16BE(flags, 2);
  return out;
}

function udpLimit(q: DecodedPacket): number {
  const opt = q.additionals?.find((a) => a.type === 'OPT');
  const size = opt && 'udpPayloadSize' in opt ? opt.udpPayloadSize : 0;
  return Math.max(UDP_DEFAULT_MAX, size);
}

/** What a too-large UDP answer becomes: its header and question, TC set, so the client asks over TCP. */
function truncate(answer: Buffer): Buffer {
  try {
    const p = dnsPacket.decode(answer);
    return dnsPacket.encode({ type: 'response', id: p.id ?? 0, flags: (p.flags ?? 0) | dnsPacket.TRUNCATED_RESPONSE, questions: p.questions ?? [] });
  } catch {
    const out = Buffer.from(answer.subarray(0, HEADER_BYTES));
    out.writeUInt16BE(out.readUInt16BE(2) | 0x0200, 2);
    out.fill(0, 4);
    return out;
  }
}

export class DnsResolver {
  private table?: LookupTable;

  constructor(private readonly forwarder: DnsForwarder) {}

  /** Replaces the lookup table (a new name table arrived). */
  update(table: LookupTable): void {
    this.table = table;
  }

  get ready(): boolean {
    return this.table !== undefined;
  }

  /** The bytes to send back, or undefined to send nothing. */
  async answer(query: Buffer, transport: Transport): Promise<Buffer | undefined> {
    if (query.length < HEADER_BYTES) {
      log.debug(`dropped a ${query.length}-byte ${transport} message: shorter than a DNS header`);
      return undefined;
    }
    let q: DecodedPacket;
    try {
      q = dnsPacket.decode(query);
    } catch (e) {
      log.debug(`malformed ${transport} query: ${(e as Error).message}`);
      return headerOnly(query, RCODE.FORMERR);
    }
    if (q.flag_qr) return undefined; // a response sent to us: nothing to answer
    const question = q.questions?.[0];
    // Like the Go mesh: no question, or no table yet (the app retries), is a server failure.
    if (!question || !this.table) return headerOnly(query, RCODE.SERVFAIL);
    const answers = this.table.lookup(question.name, question.type);
    let out: Buffer;
    if (answers) {
      log.debug(`${question.type} ${question.name}: ${answers.length} records from the name table`);
      out = this.respond(q, answers);
    } else {
      try {
        out = await this.forwarder.forward(query, transport === 'tcp');
      } catch (e) {
        log.info(`${question.type} ${question.name}: ${(e as Error).message}`);
        return headerOnly(query, RCODE.SERVFAIL);
      }
    }
    return transport === 'udp' && out.length > udpLimit(q) ? truncate(out) : out;
  }

  /** An authoritative answer: the name is the mesh's, even with no record of the asked type. */
  private respond(q: DecodedPacket, answers: Answer[]): Buffer {
    const packet: Packet = {
      type: 'response',
      id: q.id ?? 0,
      flags: opcodeBits(q.flags) | dnsPacket.AUTHORITATIVE_ANSWER | dnsPacket.RECURSION_AVAILABLE | ((q.flags ?? 0) & dnsPacket.RECURSION_DESIRED),
      questions: q.questions ?? [],
      answers,
    };
    return dnsPacket.encode(packet);
  }
}
