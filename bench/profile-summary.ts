// Prints where a .cpuprofile's busy time went: the top functions by self time and by inclusive
// time, as % of busy samples (idle left out) and ms, and the garbage collector's share.
//
//   node dist/bench/profile-summary.js <file.cpuprofile> [top N]
import { readFileSync } from 'node:fs';

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}
interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: readonly number[];
}
interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
  readonly startTime: number;
  readonly endTime: number;
}

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: profile-summary <file.cpuprofile> [top N]');
  process.exit(2);
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

const where = (f: CallFrame): string => {
  const path = f.url.replace(/^file:\/\//, '').split('/').slice(-2).join('/');
  return `${f.functionName || '(anonymous)'} ${path}${path ? `:${f.lineNumber + 1}` : ''}`;
};

// Time per sample: each sample's delta is the time since the previous one.
/** Where a frame's code lives: a package of node_modules, one of our files, node's internals, or V8. */
const moduleOf = (f: CallFrame): string => {
  const url = f.url.replace(/^file:\/\//, '');
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node internals';
  if (url === '') return f.functionName.startsWith('(') ? f.functionName : 'native';
  return url.split('/').slice(-2).join('/');
};

const selfMs = new Map<string, number>();
const moduleMs = new Map<string, number>();
const inclMs = new Map<string, number>();
let busyMs = 0;
let idleMs = 0;
profile.samples.forEach((id, i) => {
  const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
  const node = byId.get(id)!;
  if (node.callFrame.functionName === '(idle)') {
    idleMs += ms;
    return;
  }
  busyMs += ms;
  const self = where(node.callFrame);
  selfMs.set(self, (selfMs.get(self) ?? 0) + ms);
  const mod = moduleOf(node.callFrame);
  moduleMs.set(mod, (moduleMs.get(mod) ?? 0) + ms);
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const k = where(byId.get(cur)!.callFrame);
    if (k === '(root)' || seen.has(k)) continue;
    seen.add(k);
    inclMs.set(k, (inclMs.get(k) ?? 0) + ms);
  }
});

const table = (m: Map<string, number>): string =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([k, ms]) => `${((100 * ms) / busyMs).toFixed(1).padStart(5)} % ${ms.toFixed(0).padStart(7)} ms  ${k}`)
    .join('\n');
console.log(`${file}: busy ${busyMs.toFixed(0)} ms, idle ${idleMs.toFixed(0)} ms`);
console.log(`-- self time\n${table(selfMs)}\n-- self time by module\n${table(moduleMs)}\n-- inclusive time\n${table(inclMs)}`);
