// A TCP (or TLS) client for tests of byte streams through the proxy: send once connected, read
// until the echo of what was sent comes back or the connection closes.
import type { Socket } from 'node:net';

export interface Exchange {
  /** Every byte the client received. */
  readonly got: string;
  /** Whether the echo came back (the connection reached an echoing app); false: it was closed first. */
  readonly echoed: boolean;
}

/** Sends `send` on `ready` ('connect', or 'secureConnect' for TLS) and collects the answer; gives up after 10 s of silence. */
export function exchange(socket: Socket, send: string, ready: 'connect' | 'secureConnect'): Promise<Exchange> {
  return new Promise((resolve) => {
    let got = '';
    socket.setTimeout(10_000, () => socket.destroy());
    socket.once(ready, () => socket.write(send));
    socket.on('data', (d: Buffer) => {
      got += d.toString();
      if (got.endsWith(send)) {
        socket.destroy();
        resolve({ got, echoed: true });
      }
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve({ got, echoed: false }));
  });
}
