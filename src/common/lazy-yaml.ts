// The yaml package, loaded on first use: mesh-proxy's bootstrap is JSON when the agent writes it,
// and a proxy that never reads YAML keeps yaml's 70 modules out of its heap (issue 17, RSS). Sync
// (require), as the bootstrap and version paths that call it are.
import { createRequire } from 'node:module';
import type * as Yaml from 'yaml';

let yaml: typeof Yaml | undefined;

function load(): typeof Yaml {
  return (yaml ??= createRequire(import.meta.url)('yaml') as typeof Yaml);
}

export function parseYaml(text: string): unknown {
  return load().parse(text);
}

export function stringifyYaml(value: unknown): string {
  return load().stringify(value);
}
