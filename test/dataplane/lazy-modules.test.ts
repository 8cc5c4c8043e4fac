// A proxy loads re2js and undici only when its config needs them (issue 17, RSS): re2js for a
// safe_regex other than the Go mesh's `.+` and `.*`, undici for the ext_authz HTTP check. Each
// check runs in a fresh Node process, whose module cache is the proxy's own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const matchers = new URL('../../src/envoy/matchers.js', import.meta.url).href;
const pools = new URL('../../src/dataplane/upstream-pools.js', import.meta.url).href;

/**
 * Runs `body` after importing the two modules and reports which packages are loaded at each
 * `mark()`: required ones from the CommonJS cache, imported ones from a resolve hook that writes
 * each resolved URL to a file before the import proceeds.
 */
function loadedPackages(body: string): string[][] {
  const dir = mkdtempSync(join(tmpdir(), 'lazy-modules-'));
  const hook = `import { appendFileSync } from 'node:fs';
    export async function resolve(specifier, context, next) { const r = await next(specifier, context); appendFileSync(${JSON.stringify(join(dir, 'resolved'))}, r.url + '\\n'); return r; }`;
  const script = `
    import { createRequire, register } from 'node:module';
    import { existsSync, readFileSync } from 'node:fs';
    register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}));
    const { compileRegex } = await import(${JSON.stringify(matchers)});
    const { Http1Pool } = await import(${JSON.stringify(pools)});
    const cache = createRequire(import.meta.url).cache;
    const marks = [];
    const mark = () => {
      const loaded = [...Object.keys(cache), ...(existsSync(${JSON.stringify(join(dir, 'resolved'))}) ? readFileSync(${JSON.stringify(join(dir, 'resolved'))}, 'utf8').split('\\n') : [])];
      marks.push(['re2js', 'undici'].filter((p) => loaded.some((k) => k.includes('/node_modules/' + p + '/'))));
    };
    ${body}
    console.log(JSON.stringify(marks));`;
  try {
    return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script]).toString()) as string[][];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('the Go mesh\'s .+ and .* load no regex engine; the first other pattern loads re2js', () => {
  const marks = loadedPackages(`
    mark();
    compileRegex('.+', 'r'); compileRegex('.*', 'r'); mark();
    if (!compileRegex('a+b', 'r').test('aab')) throw new Error('a+b did not match aab');
    mark();`);
  assert.deepEqual(marks, [[], [], ['re2js']]);
});

test('replacement with .+ loads the engine when first used', () => {
  const marks = loadedPackages(`
    const present = compileRegex('.+', 'r'); mark();
    if (present.replaceAll('abc', 'z') !== 'z') throw new Error('replaceAll');
    mark();`);
  assert.deepEqual(marks, [[], ['re2js']]);
});

test('an invalid pattern is still a config error naming the field', () => {
  const marks = loadedPackages(`
    try { compileRegex('a(', 'route.match.safe_regex.regex'); } catch (e) { marks.push([e.message]); }`);
  assert.match(marks[0]![0]!, /route\.match\.safe_regex\.regex.*invalid regex "a\("/);
});

test('upstream pools load undici on the first ext_authz HTTP pool, not before', () => {
  const marks = loadedPackages(`
    const http1 = new Http1Pool(); mark();
    const pool = http1.pool({ host: '127.0.0.1', port: 9 });
    if (typeof pool.request !== 'function') throw new Error('no request API on the pool');
    mark();
    await pool.close();`);
  assert.deepEqual(marks, [[], ['undici']]);
});
