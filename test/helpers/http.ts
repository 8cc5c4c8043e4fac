// node:http servers on loopback for tests: listen on a free port, close with every connection.
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Listens on 127.0.0.1 at a free port and returns it. */
export async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Closes the server and every connection it has, idle or not. */
export async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
