// CommonJS packages a process loads only when it first needs them (issue 17, RSS): a mesh-proxy
// whose config never uses a regex engine, YAML or the ext_authz HTTP check keeps those modules out
// of its heap. Sync (require), as the config compilers that call them are.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/** What `load` makes of `require`, made by the first call and kept. */
export function onFirstUse<T>(load: (req: NodeJS.Require) => T): () => T {
  let loaded: { value: T } | undefined;
  return () => (loaded ??= { value: load(require) }).value;
}
