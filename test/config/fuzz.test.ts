// Fuzzes the file config store with hostile documents beside a good policy: whatever the bad file
// holds (hostile keys, wrong types, deep nesting, huge strings, duplicate keys, alias bombs, tags,
// broken syntax), it is rejected alone and named, the good policy stays in force, and a later edit
// of the good policy still applies. Seeded, so a failure names the seed and iteration to replay.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { AuthorizationPolicy } from '../../src/api/types.js';
import { validateResource } from '../../src/api/validate.js';
import { parseDocuments } from '../../src/api/parse.js';
import { FileConfigStore } from '../../src/config/file.js';
import { eventually } from '../helpers/proc.js';

const SEED = 0x5eed_11;
const STORE_ITERATIONS = 60;
const VALIDATOR_ITERATIONS = 500;

/** mulberry32: small, fast, good enough to spread inputs; deterministic per seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const HOSTILE_KEYS = ['__proto__', 'constructor', 'prototype', 'hasOwnProperty', 'toString', 'valueOf', '__defineGetter__', 'isPrototypeOf'];
const FIELD_KEYS = ['apiVersion', 'kind', 'metadata', 'spec', 'name', 'namespace', 'labels', 'selector', 'matchLabels', 'action', 'rules', 'from', 'to', 'when', 'source', 'operation', 'key', 'values', 'notValues', 'jwtRules', 'issuer', 'jwksUri', 'hosts', 'ports', 'number', 'portLevelMtls', 'endpoints', 'address'];
const KINDS = ['AuthorizationPolicy', 'RequestAuthentication', 'PeerAuthentication', 'ServiceEntry', 'WorkloadEntry', 'Sidecar', 'DestinationRule', 'VirtualService', 'Gateway', 'WorkloadGroup', 'Bogus'];
const WHEN_KEYS = [...HOSTILE_KEYS, ...HOSTILE_KEYS.map((k) => `request.auth.claims[${k}]`), ...HOSTILE_KEYS.map((k) => `request.headers[${k}]`), 'source.ip', 'request.auth.claims[a][__proto__]'];

class Generator {
  constructor(private readonly next: () => number) {}

  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  key(): string {
    const r = this.next();
    return r < 0.35 ? this.pick(HOSTILE_KEYS) : r < 0.85 ? this.pick(FIELD_KEYS) : this.string(12);
  }

  string(max: number): string {
    const alphabet = 'aZ09-_./[]*:"\\\u0000\u202e é🙂';
    return Array.from({ length: this.int(max) }, () => this.pick([...alphabet])).join('');
  }

  /** A JSON text (valid YAML) whose objects may repeat keys, which a JS object cannot express. */
  value(depth: number): string {
    const r = this.next();
    if (depth > 6 || r < 0.25) return this.scalar();
    if (r < 0.45) return `[${Array.from({ length: this.int(4) }, () => this.value(depth + 1)).join(',')}]`;
    if (r < 0.55) return this.condition();
    return this.object(Array.from({ length: this.int(5) }, () => [this.key(), this.value(depth + 1)]));
  }

  scalar(): string {
    return JSON.stringify(this.pick<unknown>([this.string(20), this.int(70000) - 5, this.next() < 0.5, null, '', this.pick(WHEN_KEYS), 'x'.repeat(this.int(this.next() < 0.05 ? 1_000_000 : 2_000))]));
  }

  condition(): string {
    return this.object([['key', JSON.stringify(this.pick(WHEN_KEYS))], [this.pick(['values', 'notValues', ...HOSTILE_KEYS]), this.value(5)]]);
  }

  object(pairs: [string, string][]): string {
    return `{${pairs.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;
  }

  /** A resource envelope around a random spec, so that the spec validators are reached. */
  resource(): string {
    const meta = this.object([['name', JSON.stringify(this.pick(['bad', 'good', 'x', this.key()]))], ['namespace', JSON.stringify(this.pick(['ns', 'other', this.key()]))], ...(this.next() < 0.3 ? [['labels', this.value(3)] as [string, string]] : [])]);
    const spec = this.next() < 0.5 ? this.object([['rules', `[${this.object([['when', `[${this.condition()},${this.condition()}]`]])}]`], [this.key(), this.value(2)]]) : this.value(1);
    const kind = this.pick(KINDS);
    const pairs: [string, string][] = [['apiVersion', JSON.stringify(kind === 'AuthorizationPolicy' ? 'security.mesh.io/v1beta1' : this.pick(['security.mesh.io/v1', 'networking.mesh.io/v1', 'v1']))], ['kind', JSON.stringify(kind)], ['metadata', meta], ['spec', spec]];
    if (this.next() < 0.3) pairs.push([this.key(), this.value(2)]);
    return this.object(pairs);
  }

  /** Raw YAML abuse: aliases, tags, duplicate keys, deep nesting, broken syntax. */
  yaml(): string {
    switch (this.int(7)) {
      case 0: {
        const levels = ['a: &a [x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${'bcdefghi'[i]}: &${'bcdefghi'[i]} [${Array(9).fill(`*${'abcdefgh'[i]}`).join(', ')}]`)];
        return levels.join('\n');
      }
      case 1:
        return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: ${this.pick(['!!set {name, namespace}', '!!binary aGk=', '!!timestamp 2001-12-14', '!foo {name: x}', '!!map {name: bad}'])}\nspec: {}\n`;
      case 2:
        return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata:\n  name: bad\n  name: good\nspec:\n  action: DENY\n  action: ALLOW\n`;
      case 3:
        return '['.repeat(200 + this.int(20_000));
      case 4:
        return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata:\n  name: bad\n  namespace: ns\nspec:\n  rules:\n  - when:\n    - &c {key: ${this.pick(WHEN_KEYS)}, values: [a]}\n    - *c\n  ${this.pick(HOSTILE_KEYS)}: *c\n`;
      case 5:
        return `: : -\n\t- ${this.string(30)}\n"unterminated`;
      default:
        return `${'- '.repeat(this.int(200))}x\n${' '.repeat(this.int(8))}${this.key()}: ${this.key()}: [`;
    }
  }

  /** A file: one to three documents of either sort. */
  file(): string {
    return Array.from({ length: 1 + this.int(3) }, () => (this.next() < 0.6 ? this.resource() : this.yaml())).join('\n---\n');
  }
}

function goodPolicy(action: 'ALLOW' | 'DENY'): string {
  return `apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata:\n  name: good\n  namespace: ns\nspec:\n  action: ${action}\n  rules:\n  - when:\n    - key: request.auth.claims[groups]\n      values: [admins]\n`;
}

describe('fuzzing validation and the file store with hostile documents', () => {
  const roots: string[] = [];
  after(async () => {
    for (const root of roots) await rm(root, { recursive: true, force: true });
  });

  it(`never throws from parse and validation, and explains every rejection (seed ${SEED})`, () => {
    const gen = new Generator(random(SEED));
    for (let i = 0; i < VALIDATOR_ITERATIONS; i++) {
      const text = gen.file();
      for (const doc of parseDocuments(text)) {
        if (doc.value === undefined) continue;
        const result = validateResource(doc.value);
        if (!result.ok) assert.ok(result.issues.length > 0 && result.issues.every((x) => x.message.length > 0), `iteration ${i}: rejection without a reason`);
      }
    }
  });

  it(`rejects each bad file alone, keeps the good policy and applies its edits (seed ${SEED})`, async () => {
    const dir = await mkdtemp(join(tmpdir(), 'pipeline-fuzz-'));
    roots.push(dir);
    await writeFile(join(dir, 'good.yaml'), goodPolicy('ALLOW'));
    const store = new FileConfigStore({ configDir: dir, debounceMs: 5 });
    await store.start();
    const action = () => (store.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'good' }) as AuthorizationPolicy | undefined)?.spec.action;
    try {
      const gen = new Generator(random(SEED + 1));
      let expected: 'ALLOW' | 'DENY' = 'ALLOW';
      for (let i = 0; i < STORE_ITERATIONS; i++) {
        const text = gen.file();
        // Named b-*.yaml: before good.yaml in path order, so a bad "ns/good" document would win if accepted.
        await writeFile(join(dir, `b-${i % 3}.yaml`), text);
        expected = expected === 'ALLOW' ? 'DENY' : 'ALLOW';
        await writeFile(join(dir, 'good.yaml'), goodPolicy(expected));
        const context = `seed ${SEED + 1}, iteration ${i}:\n${text.slice(0, 400)}`;
        await eventually(() => assert.equal(action(), expected, context));
        for (const [file, messages] of Object.entries(store.problems())) {
          for (const m of messages) assert.ok(m.startsWith(join(dir, file)), `${context}\nunnamed problem: ${m}`);
        }
      }
      await rm(join(dir, 'good.yaml'));
      await eventually(() => assert.equal(action(), undefined, 'deleting the good policy (a revocation) applies'));
    } finally {
      await store.close();
    }
  });
});
