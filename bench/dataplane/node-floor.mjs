// bench/dataplane's Node floor: about the least work an HTTP/1.1 reverse proxy on one Node.js
// thread does per request, measured in the same run as nginx and mesh-proxy, so that each table
// shows how near to the C proxy any one-worker Node proxy can come on that machine. A yardstick,
// not a proxy: each downstream connection gets its own upstream connection (no pool, no routing,
// no filters, no limits, no timeouts); request and response heads are split at their blank line
// and their header lines rewritten (hop-by-hop headers dropped, one header added), bodies are
// framed by content-length only, and each message goes out in one corked write. Plain JavaScript,
// run by node itself, so that no loader costs it anything.
//   node bench/dataplane/node-floor.mjs <listen port> <app port>
import { connect, createServer } from 'node:net';

const [listen, app] = process.argv.slice(2).map(Number);
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te']);

/** The head's start line and end-to-end header lines, `added` appended; its content-length. */
function rewrite(head, added) {
  const lines = head.split('\r\n');
  let out = `${lines[0]}\r\n`;
  let length = 0;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    if (HOP_BY_HOP.has(name)) continue;
    if (name === 'content-length') length = Number(line.slice(colon + 1));
    out += `${line}\r\n`;
  }
  return { head: `${out}${added}\r\n\r\n`, length };
}

/**
 * Relays the HTTP/1.1 messages `from` sends to `to`: each head rewritten with `added`, its
 * content-length body after it, both in one corked write.
 */
function relay(from, to, added) {
  let pending = Buffer.alloc(0);
  from.on('data', (chunk) => {
    pending = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk;
    for (;;) {
      const end = pending.indexOf('\r\n\r\n');
      if (end < 0) return;
      const { head, length } = rewrite(pending.toString('latin1', 0, end), added);
      if (pending.length < end + 4 + length) return;
      to.cork();
      to.write(head, 'latin1');
      if (length > 0) to.write(pending.subarray(end + 4, end + 4 + length));
      to.uncork();
      pending = pending.subarray(end + 4 + length);
    }
  });
  from.on('error', () => to.destroy());
  from.on('close', () => to.destroy());
}

createServer((down) => {
  const up = connect(app, '127.0.0.1');
  relay(down, up, 'x-forwarded-proto: http');
  relay(up, down, 'server: node-floor');
}).listen(listen, '127.0.0.1');
