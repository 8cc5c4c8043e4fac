// A bench script started in its own process: the sibling module with the caller's extension, so
// that it is the built .js under `npm run bench` (what production runs) and .ts under tsx.
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface SiblingScript {
  path: string;
  /** Node flags the child needs to load it (tsx's loader for a .ts file). */
  execArgv: string[];
}

/** `name` without extension, relative to the calling module's URL (`import.meta.url`). */
export function siblingScript(callerUrl: string, name: string): SiblingScript {
  const ext = extname(fileURLToPath(callerUrl));
  return { path: fileURLToPath(new URL(`${name}${ext}`, callerUrl)), execArgv: ext === '.ts' ? ['--import', 'tsx'] : [] };
}
