// The yaml package, loaded on first use: mesh-proxy's bootstrap is JSON when the agent writes it,
// and a proxy that never reads YAML keeps yaml's 70 modules out of its heap (issue 17, RSS).
import type * as Yaml from 'yaml';
import { onFirstUse } from './lazy-require.js';

const yaml = onFirstUse((req) => req('yaml') as typeof Yaml);

export function parseYaml(text: string): unknown {
  return yaml().parse(text);
}

export function stringifyYaml(value: unknown): string {
  return yaml().stringify(value);
}
