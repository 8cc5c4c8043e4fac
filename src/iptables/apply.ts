// mesh-iptables and mesh-clean-iptables end to end: build (or read) the rules, print them for
// --dry-run / --restore-format, apply them with iptables-restore per address family, then the
// policy routing, then the optional validation.
import { scope } from '../common/log.js';
import { buildCapture, type CapturePlan } from './capture.js';
import { cleanRestoreLines, parseSave, passthroughAddressRemoval, planClean, tproxyRouteTables, type CleanOptions } from './clean.js';
import type { CaptureConfig } from './config.js';
import { binaryName, commandLines, restoreLines, restoreText } from './restore.js';
import { CHAIN_PREFIX, type Family } from './rules.js';
import { CaptureError, detectBackend, ip, restore, save, type Backend } from './system.js';
import { validateCapture } from './validate.js';

const log = scope('default');

export interface CaptureOutput {
  readonly dryRun: boolean;
  readonly restoreFormat: boolean;
  readonly skipRuleApply: boolean;
  readonly runValidation: boolean;
}

function families(ipv6: boolean): Family[] {
  return ipv6 ? [4, 6] : [4];
}

/** What mesh-iptables prints: restore input (-f) or the command lines (--dry-run), and the ip commands. */
export function captureText(cfg: CaptureConfig, restoreFormat: boolean): string {
  return planText(buildCapture(cfg), restoreFormat);
}

function planText(plan: CapturePlan, restoreFormat: boolean): string {
  const out: string[] = [];
  for (const f of families(plan.rules.ipv6)) {
    const rules = plan.rules.get(f);
    if (restoreFormat) out.push(`# ${binaryName(f)}-restore --noflush\n${restoreText(rules)}`);
    else out.push(...commandLines(f, rules).map((l) => `${l}\n`));
  }
  const prefix = restoreFormat ? '# then: ' : '';
  for (const r of plan.routes) out.push(`${prefix}ip ${r.join(' ')}\n`);
  return out.join('');
}

/** Existing MESH_* chains: applying over them would fail half way, so it is refused up front. */
function existingChains(dump: string): string[] {
  const state = parseSave(dump);
  return [...state.chains].flatMap(([table, chains]) => chains.filter((c) => c.startsWith(CHAIN_PREFIX)).map((c) => `${table}/${c}`));
}

function applyRoutes(routes: readonly (readonly string[])[]): void {
  for (const r of routes) {
    const res = ip(r);
    // A rule or route left by an earlier run is what we want already.
    if (!res.ok && !/File exists/i.test(res.stderr)) throw new CaptureError(`ip ${r.join(' ')}: ${res.stderr}`);
  }
}

export async function runCapture(cfg: CaptureConfig, opts: CaptureOutput, write: (s: string) => void): Promise<void> {
  const plan = buildCapture(cfg);
  if (opts.dryRun || opts.restoreFormat) write(planText(plan, opts.restoreFormat));
  if (opts.dryRun) {
    if (opts.runValidation) log.info('dry run: validation skipped, nothing was applied');
    return;
  }
  if (opts.skipRuleApply) {
    log.info('--skip-rule-apply: no rules applied');
  } else {
    const backends = families(cfg.ipv6).map(detectBackend);
    for (const b of backends) {
      const present = existingChains(save(b));
      if (present.length > 0) throw new CaptureError(`capture rules are already present (${b.variant} ${b.save}: ${present.join(', ')}); run pilot-agent mesh-clean-iptables first`);
    }
    for (const b of backends) {
      restore(b, restoreLines(plan.rules.get(b.family)));
      log.info(`applied ${plan.rules.get(b.family).length} IPv${b.family} rules with ${b.restore}`);
    }
    applyRoutes(plan.routes);
  }
  if (opts.runValidation) await validateCapture(cfg);
}

/** mesh-clean-iptables: every family whose tables hold mesh rules is cleaned; a second run finds nothing. */
export function runClean(opts: CleanOptions & { readonly dryRun: boolean }, write: (s: string) => void): void {
  for (const family of [4, 6] as const) {
    let backend: Backend;
    try {
      backend = detectBackend(family);
    } catch (e) {
      // Without ip6tables there can be no IPv6 rules of ours to remove.
      if (family === 6) continue;
      throw e;
    }
    const plan = planClean(parseSave(save(backend)), opts);
    const lines = cleanRestoreLines(plan);
    const flag = family === 4 ? '-4' : '-6';
    const ipCommands = tproxyRouteTables(ip([flag, 'rule', 'show']).stdout, plan.marks).flatMap(({ mark, table }) => [
      [flag, 'rule', 'del', 'fwmark', String(mark), 'lookup', table],
      [flag, 'route', 'del', 'local', family === 4 ? '0.0.0.0/0' : '::/0', 'dev', 'lo', 'table', table],
    ]);
    if (opts.dryRun) {
      if (lines.length > 0) write(`# ${backend.restore} --noflush\n${lines.map((l) => `${l.text}\n`).join('')}`);
      for (const c of ipCommands) write(`ip ${c.join(' ')}\n`);
      continue;
    }
    if (lines.length > 0) restore(backend, lines);
    runIpRemovals(ipCommands);
    const removed = plan.deletes.length + [...plan.chains.values()].flat().length;
    log.info(removed === 0 ? `IPv${family}: no mesh rules found (${backend.variant}), nothing to clean` : `IPv${family}: removed ${plan.deletes.length} rules and ${removed - plan.deletes.length} chains (${backend.variant})`);
  }
  // Outside the family loop: the address is there even where ip6tables is not.
  const address = passthroughAddressRemoval(ip(['-6', 'addr', 'show', 'dev', 'lo']).stdout);
  if (opts.dryRun) for (const c of address) write(`ip ${c.join(' ')}\n`);
  else runIpRemovals(address);
}

function runIpRemovals(commands: readonly (readonly string[])[]): void {
  for (const c of commands) {
    const res = ip(c);
    // Gone already (a route deleted with its rule by someone else) is what cleaning wants.
    if (!res.ok && !/No such|Cannot find|not exist|Cannot assign/i.test(res.stderr)) throw new CaptureError(`ip ${c.join(' ')}: ${res.stderr}`);
  }
}
