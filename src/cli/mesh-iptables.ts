// pilot-agent mesh-iptables / mesh-clean-iptables: flags in, src/iptables does the work. Failures to
// apply or validate are one `Error:` line naming what failed; validation failure exits 126 as the
// Go mesh's istio-iptables does, so init containers and CNI repair can tell the two apart.
import { scope } from '../common/log.js';
import { runCapture, runClean } from '../iptables/apply.js';
import { captureConfig, splitList } from '../iptables/config.js';
import { CaptureError, podFacts } from '../iptables/system.js';
import { ValidationError } from '../iptables/validate.js';
import type { RunContext } from './command.js';

const VALIDATION_FAILED = 126;

async function reportErrors(run: () => Promise<void> | void): Promise<number> {
  try {
    await run();
    return 0;
  } catch (e) {
    if (!(e instanceof CaptureError)) throw e;
    process.stderr.write(`Error: ${e.message}\n`);
    return e instanceof ValidationError ? VALIDATION_FAILED : 1;
  }
}

export function meshIptables(ctx: RunContext): Promise<number> {
  const f = ctx.flags;
  const cfg = captureConfig(f, podFacts());
  if (f.bool('redirect-dns') && !cfg.redirectDns) scope('default').warn('--redirect-dns: /etc/resolv.conf names no name server, so DNS capture is disabled (as the Go mesh does)');
  const write = (s: string) => void process.stdout.write(s);
  return reportErrors(() =>
    runCapture(cfg, { dryRun: f.bool('dry-run'), restoreFormat: f.bool('restore-format'), skipRuleApply: f.bool('skip-rule-apply'), runValidation: f.bool('run-validation') }, write),
  );
}

export function meshCleanIptables(ctx: RunContext): Promise<number> {
  const f = ctx.flags;
  const facts = podFacts();
  const uids = splitList(f.string('proxy-uid') || facts.defaultProxyUid);
  const gids = splitList(f.string('proxy-gid'));
  return reportErrors(() => runClean({ uids, gids: gids.length > 0 ? gids : uids, dryRun: f.bool('dry-run') }, (s) => void process.stdout.write(s)));
}
