// The introspection page in a real browser (Debian's Chromium driven by playwright-core) against the
// real pilot-discovery process: the page renders live data (uptime ticks, a proxy that connects
// shows up), and changing a scope's level on the page changes what the program logs. A screenshot
// is kept under test-artifacts/ (gitignored).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { freePort } from '../../samples/local-mesh.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { discoveryArgs, eventually, REPO_ROOT, Running, start } from '../helpers/proc.js';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const ARTIFACTS = join(REPO_ROOT, 'test-artifacts');

function proxyClient(grpc: string, name: string): AdsClient {
  const ads = new AdsClient({
    address: grpc,
    node: { id: `sidecar~127.0.0.1~${name}.default~default.svc.cluster.local`, metadata: { NAMESPACE: 'default', LABELS: { app: name }, INTERCEPTION_MODE: 'NONE' } },
    onUpdate: () => undefined,
  });
  ads.start();
  return ads;
}

test('the introspection page: live values, and a scope level changed on the page changes the log', { skip: existsSync(CHROMIUM) ? false : `no browser at ${CHROMIUM} (apt-get install chromium)`, timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'ctrlz-ui-'));
  copyFileSync(join(REPO_ROOT, 'samples', 'config', 'workloads.yaml'), join(dir, 'workloads.yaml'));
  const port = await freePort();
  const d = new Running(start('pilot-discovery', discoveryArgs(dir, { ctrlz_address: '127.0.0.1', ctrlz_port: String(port) })));
  let context: BrowserContext | undefined;
  const clients: AdsClient[] = [];
  try {
    const grpc = (await d.waitFor(/gRPC xDS server listening on (\S+)/, 30_000))[1]!;
    const base = (await d.waitFor(/introspection facility \(ControlZ\) listening on (http:\S+)/, 30_000))[1]!;
    context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'ctrlz-chromium-')), { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, viewport: { width: 1280, height: 900 } });
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(30_000);
    await page.goto(base);

    // Live: the uptime shown moves on without a reload.
    const uptime = page.locator('#process-uptime');
    await uptime.waitFor();
    const first = await uptime.textContent();
    await page.waitForFunction(`document.getElementById('process-uptime').textContent !== ${JSON.stringify(first)}`);
    assert.equal(await page.locator('#process-pid').textContent(), String(d.child.pid));

    // A proxy connecting while `ads` is at info: it appears on the page, and no ads debug line is logged.
    const before = proxyClient(grpc, 'before');
    clients.push(before);
    await page.locator('#proxies td', { hasText: 'before.default' }).waitFor();
    await eventually(() => assert.ok(before.version(TypeUrl.Listener), 'the first proxy got its listeners'), 30_000);
    assert.doesNotMatch(d.output, /\tdebug\tads\t/, 'no ads debug line before the change');

    // The level changed on the page: the program confirms it, and the next proxy's pushes are logged at debug.
    await page.selectOption('#scope-ads-outputLevel', 'debug');
    await page.locator('#scope-status', { hasText: 'scope ads: output debug' }).waitFor();
    await d.waitFor(/warn\tdefault\tintrospection: scope ads set to output debug/);
    clients.push(proxyClient(grpc, 'after'));
    await d.waitFor(/\tdebug\tads\t\S+: sent lds/, 30_000);
    await page.locator('#proxies td', { hasText: 'after.default' }).waitFor();
    assert.equal(await page.locator('#scope-ads-outputLevel').inputValue(), 'debug');

    // A bad value from a script is refused naming the scope and level; the page's value stands.
    const bad = await page.evaluate(async () => {
      const r = await fetch('/api/v1/scopes/ads', { method: 'PUT', body: JSON.stringify({ outputLevel: 'verbose' }) });
      return { status: r.status, body: (await r.json()) as { error: string } };
    });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /scope "ads": invalid outputLevel "verbose"/);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'ctrlz.png'), fullPage: true });
  } finally {
    for (const c of clients) c.close();
    await context?.close();
    await d.stop();
  }
});
