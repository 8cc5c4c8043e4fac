// Profiling of the real pilot-discovery process over its HTTP debug address: with --profile, the CPU
// and heap profiles decode with pprof-format (the library that wrote them) and name the program's
// own functions; V8's .cpuprofile and heap snapshot load as JSON; a bad `seconds` is a 400 naming
// it; without --profile the endpoints do not exist.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Profile } from 'pprof-format';
import { discoveryArgs, Running, start } from '../helpers/proc.js';

async function discovery(extra: string[]): Promise<{ d: Running; http: string }> {
  const d = new Running(start('pilot-discovery', [...discoveryArgs(), ...extra]));
  const http = (await d.waitFor(/http server listening on (\S+)/, 30_000))[1]!;
  await d.waitFor(/discovery server ready/, 30_000);
  return { d, http: `http://${http}` };
}

const strings = (p: Profile) => p.stringTable.strings;
const fileNames = (p: Profile) => p.function.map((f) => strings(p)[Number(f.filename)]!);

test('--profile: pprof CPU and heap profiles of the running program, V8 formats, bad seconds', { timeout: 120_000 }, async () => {
  const { d, http } = await discovery(['--profile']);
  try {
    const listed = (await (await fetch(`${http}/debug`)).json()) as Array<{ path: string }>;
    assert.ok(listed.some((e) => e.path === '/debug/pprof/profile'), '/debug lists the profiling endpoints');
    assert.match(await (await fetch(`${http}/debug/pprof/`)).text(), /\/debug\/pprof\/heap/);

    // Keep the program busy in its own code while the profile runs.
    let busy = true;
    const load = (async () => {
      while (busy) await (await fetch(`${http}/debug/configz`)).text();
    })();
    const res = await fetch(`${http}/debug/pprof/profile?seconds=2`);
    busy = false;
    await load;
    assert.equal(res.status, 200);
    const cpu = Profile.decode(new Uint8Array(await res.arrayBuffer()));
    assert.deepEqual(cpu.sampleType.map((t) => `${strings(cpu)[Number(t.type)]}/${strings(cpu)[Number(t.unit)]}`), ['samples/count', 'cpu/nanoseconds']);
    assert.ok(cpu.sample.length > 0, 'CPU samples');
    assert.ok(Number(cpu.durationNanos) >= 1.9e9, 'the profile spans the requested seconds');
    assert.ok(fileNames(cpu).some((f) => f.includes('/dist/src/')), `functions of the program itself among ${cpu.function.length}`);

    const heapRes = await fetch(`${http}/debug/pprof/heap`);
    assert.equal(heapRes.status, 200);
    const heap = Profile.decode(new Uint8Array(await heapRes.arrayBuffer()));
    assert.deepEqual(heap.sampleType.map((t) => strings(heap)[Number(t.type)]), ['inuse_objects', 'inuse_space']);
    assert.ok(heap.sample.length > 0, 'heap samples');
    assert.ok(fileNames(heap).some((f) => f.includes('/dist/src/')), 'allocations by the program itself');

    const v8 = (await (await fetch(`${http}/debug/pprof/cpuprofile?seconds=1`)).json()) as { nodes: Array<{ callFrame: { functionName: string } }>; samples: number[] };
    assert.ok(v8.nodes.some((n) => n.callFrame.functionName === '(root)'), 'a V8 .cpuprofile');
    const snapshot = (await (await fetch(`${http}/debug/pprof/heapsnapshot`)).json()) as { snapshot: { meta: { node_fields: string[] }; node_count: number } };
    assert.ok(snapshot.snapshot.node_count > 0 && snapshot.snapshot.meta.node_fields.includes('name'), 'a V8 heap snapshot');

    const handles = (await (await fetch(`${http}/debug/pprof/handles`)).json()) as { activeResources: Record<string, number> };
    assert.ok((handles.activeResources.TCPServerWrap ?? 0) >= 2, 'the listening servers are active handles');

    for (const bad of ['abc', '0', '301', '1.5', '-2']) {
      const r = await fetch(`${http}/debug/pprof/profile?seconds=${bad}`);
      assert.equal(r.status, 400, bad);
      assert.equal(await r.text(), `invalid seconds "${bad}": expected a whole number of seconds from 1 to 300\n`);
    }
  } finally {
    await d.stop();
  }
});

test('without --profile there is no /debug/pprof/', { timeout: 60_000 }, async () => {
  const { d, http } = await discovery([]);
  try {
    for (const p of ['/debug/pprof/', '/debug/pprof/profile?seconds=1', '/debug/pprof/heap']) {
      const r = await fetch(http + p);
      assert.equal(r.status, 404, p);
      assert.match(await r.text(), /404 page not found: \/debug\/pprof/);
    }
  } finally {
    await d.stop();
  }
});
