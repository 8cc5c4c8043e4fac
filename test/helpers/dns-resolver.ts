// A DNS resolver for tests (the "upstream" of the agent's DNS proxy): UDP and TCP on one port,
// answering as the test's `answer` function says, and recording every question it was asked.
import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import dnsPacket, { type Answer, type Question } from 'dns-packet';

/** Records to answer; `truncate` sets TC with no records; `silent` never answers; undefined is NXDOMAIN. */
export type Reply = Answer[] | 'truncate' | 'silent' | undefined;

export class TestResolver {
  private readonly udp: Socket = createSocket('udp4');
  private readonly tcp: Server = createServer((s) => {
    let buf = Buffer.alloc(0);
    s.on('error', () => s.destroy());
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length < 2 || buf.length < 2 + buf.readUInt16BE(0)) return;
      const answer = this.reply(buf.subarray(2, 2 + buf.readUInt16BE(0)), 'tcp');
      if (!answer) return;
      s.end(Buffer.concat([Buffer.from([answer.length >> 8, answer.length & 0xff]), answer]));
    });
  });
  /** `<transport> <type> <name>` of every question, in arrival order. */
  readonly asked: string[] = [];
  port = 0;

  constructor(private readonly answer: (q: Question, transport: 'udp' | 'tcp') => Reply) {}

  /** Binds UDP and TCP on `host`, on `port` (0: a free port, the same for both). */
  async start(host = '127.0.0.1', port = 0): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.tcp.once('error', reject);
      this.tcp.listen(port, host, resolve);
    });
    this.port = (this.tcp.address() as { port: number }).port;
    await new Promise<void>((resolve, reject) => {
      this.udp.once('error', reject);
      this.udp.bind(this.port, host, resolve);
    });
    this.udp.on('message', (msg, from) => {
      const answer = this.reply(msg, 'udp');
      if (answer) this.udp.send(answer, from.port, from.address);
    });
  }

  close(): void {
    this.udp.close();
    this.tcp.close();
  }

  private reply(msg: Buffer, transport: 'udp' | 'tcp'): Buffer | undefined {
    const q = dnsPacket.decode(msg);
    const question = q.questions![0]!;
    this.asked.push(`${transport} ${question.type} ${question.name}`);
    const r = this.answer(question, transport);
    if (r === 'silent') return undefined;
    const flags = dnsPacket.RECURSION_AVAILABLE | (r === 'truncate' ? dnsPacket.TRUNCATED_RESPONSE : 0) | (r === undefined ? 3 : 0);
    return dnsPacket.encode({ type: 'response', id: q.id ?? 0, flags, questions: q.questions ?? [], answers: Array.isArray(r) ? r : [] });
  }
}
