// --run-validation: proves that the capture rules redirect, the way the Go mesh's validator does. It
// listens where redirected traffic lands (127.0.0.1 on the dataplane and inbound capture ports) and
// connects, as the proxy's user, to 127.0.0.6 on the probe port, where nothing listens: only a
// working redirect brings that connection to a listener, which reads its original destination
// (SO_ORIGINAL_DST) and recognises the probe port.
import { connect, createServer, type Server } from 'node:net';
import { scope } from '../common/log.js';
import { originalDstUnavailable, restoreOriginalDst } from '../dataplane/original-dst.js';
import type { CaptureConfig } from './config.js';
import { CaptureError } from './system.js';

const log = scope('default');

/** The rules do not redirect (or could not be probed): the pod is not ready for the mesh. */
export class ValidationError extends CaptureError {}

const PROBE_SOURCE = '127.0.0.1';
const PROBE_TARGET = '127.0.0.6';
const RETRY_MS = 200;

function listen(port: number, onProbe: () => void, probePort: number): Promise<Server | string> {
  const server = createServer((socket) => {
    // The prober closes as soon as it is connected; a reset of the echo is expected.
    socket.on('error', () => undefined);
    const dst = restoreOriginalDst(socket, port);
    // The original port is echoed back for whoever debugs with a manual connection.
    socket.end(String(dst?.port ?? socket.localPort));
    if (dst?.port === probePort) onProbe();
  });
  return new Promise((resolve) => {
    server.once('error', (e) => resolve(`${PROBE_SOURCE}:${port}: ${e.message}`));
    server.listen(port, PROBE_SOURCE, () => resolve(server));
  });
}

function attempt(port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const s = connect({ host: PROBE_TARGET, port, localAddress: PROBE_SOURCE });
    s.on('connect', () => s.destroy());
    s.on('close', () => resolve(undefined));
    s.on('error', (e) => resolve(e.message));
  });
}

/** Owner the probe's connection must have for the OUTPUT rules to redirect it (the proxy's). */
function becomeProxyUser(cfg: CaptureConfig): void {
  if (process.getuid?.() !== 0 || !process.setuid || !process.setgid) return;
  const uid = cfg.proxyUids[0];
  const gid = cfg.proxyGids[0];
  if (gid !== undefined) process.setgid(/^\d+$/.test(gid) ? Number(gid) : gid);
  if (uid !== undefined) process.setuid(/^\d+$/.test(uid) ? Number(uid) : uid);
}

export async function validateCapture(cfg: CaptureConfig): Promise<void> {
  const missing = originalDstUnavailable();
  if (missing) throw new ValidationError(`validation needs SO_ORIGINAL_DST: ${missing}`);
  becomeProxyUser(cfg);
  let done!: () => void;
  const probed = new Promise<void>((r) => (done = r));
  const ports = [...new Set([Number(cfg.proxyPort), Number(cfg.inboundCapturePort)])];
  const bound = await Promise.all(ports.map((p) => listen(p, done, cfg.probePort)));
  const servers = bound.filter((b): b is Server => typeof b !== 'string');
  try {
    if (servers.length === 0) throw new ValidationError(`validation could not listen where redirected traffic arrives: ${bound.join('; ')}`);
    log.info(`validating capture: connecting to ${PROBE_TARGET}:${cfg.probePort} as uid ${process.getuid?.()}, expecting it at ${PROBE_SOURCE}:${ports.join('/')}`);
    let last: string | undefined;
    let finished = false;
    const timeout = new Promise<void>((r) => setTimeout(r, cfg.probeTimeoutMs).unref());
    const loop = (async () => {
      while (!finished) {
        last = await attempt(cfg.probePort);
        if (!finished) await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    })();
    const ok = await Promise.race([probed.then(() => true), timeout.then(() => false)]);
    finished = true;
    await loop;
    if (!ok) {
      throw new ValidationError(
        `validation failed: no connection to ${PROBE_TARGET}:${cfg.probePort} was redirected to ${PROBE_SOURCE}:${ports.join(' or ')} within ${cfg.probeTimeoutMs} ms` +
          ` (last attempt: ${last ?? 'connected, but not through the capture rules'}); the traffic capture rules are not in place`,
      );
    }
    log.info('validation passed: the capture rules redirect traffic');
  } finally {
    for (const s of servers) s.close();
  }
}
