// The process entry point of a program: runs the command line, sets the exit code. Apart from
// runtime.ts so that mesh-proxy, which uses none of the shared runtime (settings, the mesh's
// metrics registry and prom-client), does not load it.
import { execute, type CommandDef } from './command.js';

export function main(root: CommandDef): void {
  execute(root, process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (e: unknown) => {
      process.stderr.write(`Error: ${e instanceof Error ? e.message : String(e)}\n`);
      process.exitCode = 1;
    },
  );
}
