// A server the dataplane bench runs in a child process (nginx, the Node floor): started, polled
// until it answers, and stopped with the signal that lets it exit cleanly.
import { spawn } from 'node:child_process';

export interface ChildServer {
  pid: number;
  stop(): Promise<void>;
}

export interface ChildServerSpec {
  /** What the server is, for errors. */
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** A URL that answers once the server is up. */
  readonly ready: string;
  /** What to do when the command cannot be started (e.g. which Debian package has it). */
  readonly hint?: string;
  readonly stopSignal: NodeJS.Signals;
}

export async function startChildServer(spec: ChildServerSpec): Promise<ChildServer> {
  const child = spawn(spec.command, spec.args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  await new Promise<void>((resolve, reject) => {
    child.on('error', (e) => reject(new Error(`${spec.name} could not start (${e.message})${spec.hint ? `; ${spec.hint}` : ''}`)));
    child.on('exit', (code) => reject(new Error(`${spec.name} exited (${code}): ${err.trim()}`)));
    const poll = async (): Promise<void> => {
      try {
        await fetch(spec.ready);
        resolve();
      } catch {
        setTimeout(() => void poll(), 100);
      }
    };
    void poll();
  });
  child.removeAllListeners('exit');
  return {
    pid: child.pid!,
    stop: () =>
      new Promise<void>((resolve) => {
        child.on('exit', () => resolve());
        child.kill(spec.stopSignal);
      }),
  };
}
