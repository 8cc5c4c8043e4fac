// Starts the introspection facility (ControlZ) of a long-running command from its flags.
import { listSettings, type Program } from '../common/env.js';
import { programRegistry } from '../common/metrics.js';
import type { ProxyView } from '../debug/ctrlz/api.js';
import { CtrlzServer } from '../debug/ctrlz/server.js';
import type { RunContext } from './command.js';

export async function startCtrlz(program: Program, component: string, ctx: RunContext, proxies?: () => readonly ProxyView[]): Promise<CtrlzServer> {
  const ctrlz = new CtrlzServer({
    component,
    address: ctx.flags.string('ctrlz_address'),
    port: ctx.flags.number('ctrlz_port'),
    argv: process.argv.slice(1),
    flags: ctx.flags.snapshot(),
    settings: () => listSettings(program),
    metrics: programRegistry(program),
    ...(proxies ? { proxies } : {}),
  });
  await ctrlz.start();
  return ctrlz;
}
