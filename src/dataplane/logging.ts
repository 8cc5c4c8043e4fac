// The proxy's log components and levels, named as Envoy names them so that --component-log-level
// and the admin API's /logging read the same as for Envoy; they map onto the mesh's log scopes.
import type { Level } from '../common/log.js';

/** The proxy's log components (each a log scope). */
export const PROXY_COMPONENTS = ['admin', 'config', 'connection', 'conn_handler', 'http', 'http2', 'jwt', 'rbac', 'ext_authz', 'router', 'upstream', 'main', 'misc', 'filter', 'pool', 'adsc'] as const;

/** Envoy's level names onto the mesh's levels. */
export const PROXY_LEVELS: Readonly<Record<string, Level>> = { trace: 'debug', debug: 'debug', info: 'info', warning: 'warn', warn: 'warn', error: 'error', critical: 'fatal', off: 'none' };

/** Envoy's name of a mesh level, for listing. */
export function envoyLevelName(l: Level): string {
  return { debug: 'debug', info: 'info', warn: 'warning', error: 'error', fatal: 'critical', none: 'off' }[l];
}
