// Config analysis in the real pilot-discovery process (PILOT_ENABLE_ANALYSIS=true) reading a config
// directory: a VirtualService routing to a subset no DestinationRule defines shows at
// /debug/analyze with its code and field path, is logged once, is counted by the validator metrics,
// and goes away when the DestinationRule is fixed. Without the variable the endpoint says it is off.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { discoveryArgs, eventually, REPO_ROOT, Running, start } from '../helpers/proc.js';

function routing(subsets: string[]): string {
  return `apiVersion: networking.mesh.io/v1
kind: DestinationRule
metadata: { name: httpbin, namespace: default }
spec:
  host: httpbin.default.svc.cluster.local
  subsets: [${subsets.map((s) => `{ name: ${s}, labels: { version: ${s} } }`).join(', ')}]
---
apiVersion: networking.mesh.io/v1
kind: VirtualService
metadata: { name: httpbin, namespace: default }
spec:
  hosts: [httpbin.default.svc.cluster.local]
  http:
  - route:
    - destination: { host: httpbin.default.svc.cluster.local, subset: v2 }
`;
}

interface Analysis {
  enabled: boolean;
  messages: Array<{ code: string; name: string; resource: { kind: string; namespace: string; name: string }; path: string; message: string }>;
  reason?: string;
}

function metric(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : NaN;
}

test('a bad subset reference: shown at /debug/analyze, logged once, counted, gone when fixed', { timeout: 90_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'analysis-'));
  copyFileSync(join(REPO_ROOT, 'samples', 'config', 'workloads.yaml'), join(dir, 'workloads.yaml'));
  writeFileSync(join(dir, 'routing.yaml'), routing(['v1']));
  const d = new Running(start('pilot-discovery', discoveryArgs(dir), { env: { PILOT_ENABLE_ANALYSIS: 'true' } }));
  try {
    const http = `http://${(await d.waitFor(/http server listening on (\S+)/, 30_000))[1]}`;
    const monitoring = `http://${(await d.waitFor(/monitoring server listening on (\S+)/, 30_000))[1]}`;
    await d.waitFor(/discovery server ready/, 30_000);
    const listed = (await (await fetch(`${http}/debug`)).json()) as Array<{ path: string }>;
    assert.ok(listed.some((e) => e.path === '/debug/analyze'));

    const analysis = await eventually(async () => {
      const a = (await (await fetch(`${http}/debug/analyze`)).json()) as Analysis;
      assert.equal(a.messages.length, 1, JSON.stringify(a));
      return a;
    }, 20_000);
    assert.deepEqual(
      { code: analysis.messages[0]!.code, name: analysis.messages[0]!.name, resource: analysis.messages[0]!.resource, path: analysis.messages[0]!.path },
      { code: 'MSH0101', name: 'ReferencedResourceNotFound', resource: { kind: 'VirtualService', namespace: 'default', name: 'httpbin' }, path: 'spec.http[0].route[0].destination.subset' },
    );
    const logged = /warn\tanalysis\tError MSH0101 \(ReferencedResourceNotFound\) VirtualService default\/httpbin spec.http\[0\].route\[0\].destination.subset: subset "v2" of host httpbin.default.svc.cluster.local is not defined by any DestinationRule/g;
    await d.waitFor(logged);

    const metrics = await (await fetch(`${monitoring}/metrics`)).text();
    assert.ok(metric(metrics, 'validator_runtime_processor_snapshots_published_total') >= 1, 'snapshots counted');
    assert.equal(metric(metrics, 'validator_runtime_state_type_instances_total{collection="networking.mesh.io/VirtualService"}'), 1);
    assert.equal(metric(metrics, 'validator_runtime_state_type_instances_total{collection="networking.mesh.io/DestinationRule"}'), 1);
    assert.ok(metric(metrics, 'validator_source_orch_dynamic_converter_success_total') >= 5, 'the resources converted');
    assert.doesNotMatch(metrics, /# HELP validator_runtime_processor_snapshots_published_total .*not yet effective/);

    // An unrelated change re-analyses (another snapshot) without logging the same result again.
    writeFileSync(join(dir, 'extra.yaml'), 'apiVersion: security.mesh.io/v1beta1\nkind: PeerAuthentication\nmetadata: { name: ns, namespace: default }\nspec: { mtls: { mode: PERMISSIVE } }\n');
    await eventually(async () => {
      const m = await (await fetch(`${monitoring}/metrics`)).text();
      assert.equal(metric(m, 'validator_runtime_state_type_instances_total{collection="security.mesh.io/PeerAuthentication"}'), 1);
      assert.ok(metric(m, 'validator_runtime_strategy_on_change_total') >= 1);
    }, 20_000);
    assert.equal(d.output.match(logged)?.length, 1, 'the same result is logged once');

    // Fixed: the message goes away.
    writeFileSync(join(dir, 'routing.yaml'), routing(['v1', 'v2']));
    await eventually(async () => {
      const a = (await (await fetch(`${http}/debug/analyze`)).json()) as Analysis;
      assert.deepEqual(a.messages, []);
    }, 20_000);
    await d.waitFor(/info\tanalysis\tconfig analysis: 0 message\(s\)/);
  } finally {
    await d.stop();
  }
});

test('without PILOT_ENABLE_ANALYSIS, /debug/analyze says analysis is off', { timeout: 60_000 }, async () => {
  const d = new Running(start('pilot-discovery', discoveryArgs()));
  try {
    const http = `http://${(await d.waitFor(/http server listening on (\S+)/, 30_000))[1]}`;
    const a = (await (await fetch(`${http}/debug/analyze`)).json()) as Analysis;
    assert.deepEqual(a, { enabled: false, messages: [], reason: 'config analysis is off; set PILOT_ENABLE_ANALYSIS=true' });
  } finally {
    await d.stop();
  }
});
