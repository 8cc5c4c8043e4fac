// The agent's ProxyConfig: the mesh config file's `defaultConfig`, overridden by the PROXY_CONFIG
// variable, then by the pod annotation `proxy.mesh.io/config`. Each layer sets only the fields it
// names (proxyMetadata merges key by key), so an annotation can change one port and keep the rest.
//
// Field names and defaults follow the production mesh's ProxyConfig, so a config written for it
// reads the same here. Two fields are ours: `xdsProxyPort` (the agent's local xDS server) and
// `metricsPort` (the merged Prometheus endpoint); docs/agent.md has the table.
import { readFile } from 'node:fs/promises';
import type { JsonObject } from '@bufbuild/protobuf';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import type { ReadinessProbe } from '../api/types.js';
import { DurationError, formatDuration, parseDuration, toMillis } from '../common/duration.js';
import { readinessProbeIssues } from './readiness-probe.js';

export type InterceptionMode = 'REDIRECT' | 'TPROXY' | 'NONE';
export const INTERCEPTION_MODES: readonly InterceptionMode[] = ['REDIRECT', 'TPROXY', 'NONE'];

export interface ProxyConfig {
  /** Directory the bootstrap file is written to. */
  configPath: string;
  /** The proxy executable; empty = this repository's `bin/mesh-proxy.js` run by the same Node. */
  binaryPath: string;
  serviceCluster: string;
  /** Listener drain time the proxy uses on hot changes (passed as --drain-time-s), ms. */
  drainDuration: number;
  /** How long the agent waits after asking the proxy to drain on SIGTERM, ms. */
  terminationDrainDuration: number;
  /** host:port of the discovery server (plaintext gRPC; see docs/agent.md on TLS). */
  discoveryAddress: string;
  proxyAdminPort: number;
  /** Readiness (`/healthz/ready`). */
  statusPort: number;
  /** Merged agent + proxy Prometheus metrics (`/stats/prometheus`); ours; 0 = not served. */
  metricsPort: number;
  /** The agent's local xDS server the proxy connects to (PROXY_XDS_VIA_AGENT); ours. */
  xdsProxyPort: number;
  /** Proxy worker threads; the --concurrency flag wins when it is above 0. */
  concurrency: number;
  /** Extra variables for node metadata (`MESH_META_*`, `MESH_METAJSON_*`); the process env wins. */
  proxyMetadata: Record<string, string>;
  interceptionMode: InterceptionMode;
  /**
   * The workload's health check (the Go mesh's ProxyConfig.readinessProbe), kept as written: the
   * agent probes the application and reports health transitions upstream (workload-health.ts).
   */
  readinessProbe?: ReadinessProbe;
}

export const PROXY_CONFIG_DEFAULTS: Readonly<ProxyConfig> = Object.freeze({
  configPath: './etc/mesh/proxy',
  binaryPath: '',
  serviceCluster: 'mesh-proxy',
  drainDuration: 45_000,
  terminationDrainDuration: 5_000,
  discoveryAddress: 'meshd.mesh-system.svc:15012',
  proxyAdminPort: 15000,
  statusPort: 15021,
  metricsPort: 15020,
  xdsProxyPort: 15011,
  concurrency: 2,
  proxyMetadata: {},
  interceptionMode: 'REDIRECT',
});

/** The annotation that overrides ProxyConfig for one workload. */
export const PROXY_CONFIG_ANNOTATION = 'proxy.mesh.io/config';
export const DEFAULT_ANNOTATIONS_FILE = './etc/mesh/pod/annotations';

/** A user's config error: names the source (file, variable, annotation), the field and the value. */
export class ProxyConfigError extends Error {}

type FieldKind = 'string' | 'port' | 'count' | 'duration' | 'stringMap' | 'interception' | 'readinessProbe';
const FIELDS: Record<keyof ProxyConfig, FieldKind> = {
  configPath: 'string',
  binaryPath: 'string',
  serviceCluster: 'string',
  drainDuration: 'duration',
  terminationDrainDuration: 'duration',
  discoveryAddress: 'string',
  proxyAdminPort: 'port',
  statusPort: 'port',
  metricsPort: 'port',
  xdsProxyPort: 'port',
  concurrency: 'count',
  proxyMetadata: 'stringMap',
  interceptionMode: 'interception',
  readinessProbe: 'readinessProbe',
};

function isField(name: string): name is keyof ProxyConfig {
  return Object.hasOwn(FIELDS, name);
}

/** Converts one field's YAML value; throws a message naming what is expected. */
function fieldValue(kind: FieldKind, v: unknown): ProxyConfig[keyof ProxyConfig] {
  const expected = (what: string) => new Error(`expected ${what}, got ${JSON.stringify(v)}`);
  switch (kind) {
    case 'string':
      if (typeof v !== 'string') throw expected('a string');
      return v;
    case 'port':
    case 'count': {
      const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
      const max = kind === 'port' ? 65535 : 1024;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > max) throw expected(`an integer from 0 to ${max}`);
      return n;
    }
    case 'duration':
      // Durations are Go strings ("45s") as in protobuf JSON; a bare number is seconds.
      if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v * 1000;
      if (typeof v !== 'string') throw expected('a duration such as 5s or 1m30s');
      try {
        const ns = parseDuration(v);
        if (ns < 0n) throw expected('a non-negative duration');
        return toMillis(ns);
      } catch (e) {
        if (e instanceof DurationError) throw expected('a duration such as 5s or 1m30s');
        throw e;
      }
    case 'stringMap': {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) throw expected('a map of strings');
      const out: Record<string, string> = {};
      for (const [k, x] of Object.entries(v)) {
        if (typeof x !== 'string') throw new Error(`key ${JSON.stringify(k)}: expected a string, got ${JSON.stringify(x)}`);
        out[k] = x;
      }
      return out;
    }
    case 'interception':
      if (typeof v !== 'string' || !(INTERCEPTION_MODES as readonly string[]).includes(v)) throw expected(`one of ${INTERCEPTION_MODES.join(', ')}`);
      return v as InterceptionMode;
    case 'readinessProbe':
      // Checked by proxyConfigOverlay, whose messages carry the nested field paths.
      return v as ReadinessProbe;
  }
}

/**
 * Checks a parsed ProxyConfig document and returns the fields it sets. `source` names where it
 * came from, e.g. `mesh config file ./etc/mesh/config/mesh, defaultConfig`.
 */
export function proxyConfigOverlay(doc: unknown, source: string): Partial<ProxyConfig> {
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ProxyConfigError(`${source}: expected a ProxyConfig map, got ${JSON.stringify(doc)}`);
  const out: Partial<Record<keyof ProxyConfig, unknown>> = {};
  for (const [name, v] of Object.entries(doc)) {
    if (!isField(name)) throw new ProxyConfigError(`${source}: unknown field "${name}"; known fields: ${Object.keys(FIELDS).join(', ')}`);
    if (v === null) continue;
    const probeIssues = FIELDS[name] === 'readinessProbe' ? readinessProbeIssues(v, name) : [];
    if (probeIssues.length) throw new ProxyConfigError(`${source}: ${probeIssues.map((i) => `field "${i.path}": ${i.message}`).join('; ')}`);
    try {
      out[name] = fieldValue(FIELDS[name], v);
    } catch (e) {
      throw new ProxyConfigError(`${source}: field "${name}": ${(e as Error).message}`);
    }
  }
  return out as Partial<ProxyConfig>;
}

/** Parses YAML (JSON is YAML) text; a syntax error names the source and the line. */
function parseText(text: string, source: string): unknown {
  try {
    return parseYaml(text);
  } catch (e) {
    if (e instanceof YAMLParseError) throw new ProxyConfigError(`${source}: invalid YAML: ${e.message.split('\n')[0]}`);
    throw e;
  }
}

/** Applies overlays in order; later layers win field by field, proxyMetadata key by key. */
export function mergeProxyConfig(base: Readonly<ProxyConfig>, ...overlays: Partial<ProxyConfig>[]): ProxyConfig {
  const out: ProxyConfig = { ...base, proxyMetadata: { ...base.proxyMetadata } };
  for (const o of overlays) {
    const { proxyMetadata, ...rest } = o;
    Object.assign(out, rest);
    if (proxyMetadata) Object.assign(out.proxyMetadata, proxyMetadata);
  }
  return out;
}

/** The `defaultConfig` of a mesh config file; other mesh fields are the discovery server's. */
export function meshConfigOverlay(text: string, file: string): Partial<ProxyConfig> {
  const doc = parseText(text, `mesh config file ${file}`);
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ProxyConfigError(`mesh config file ${file}: expected a map of mesh config fields`);
  return proxyConfigOverlay((doc as Record<string, unknown>)['defaultConfig'], `mesh config file ${file}, defaultConfig`);
}

/**
 * Reads a downward-API annotations (or labels) file: one `key="value"` per line, the value quoted
 * with Go's rules (JSON-compatible for what orchestrators write). A line that is not in that form
 * is an error naming the file and line.
 */
export function parseDownwardApiFile(text: string, file: string): Record<string, string> {
  const out: Record<string, string> = {};
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const eq = line.indexOf('=');
    const key = eq > 0 ? line.slice(0, eq).trim() : '';
    const raw = eq > 0 ? line.slice(eq + 1).trim() : '';
    let value: unknown;
    try {
      value = raw.startsWith('"') ? JSON.parse(raw) : undefined;
    } catch {
      value = undefined;
    }
    if (key === '' || typeof value !== 'string') {
      throw new ProxyConfigError(`${file}:${i + 1}: expected key="value", got ${JSON.stringify(line)}`);
    }
    out[key] = value;
  });
  return out;
}

/** Reads a file, or undefined when it does not exist (absent files mean "not set"). */
export async function readOptional(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ProxyConfigError(`cannot read ${file}: ${(e as Error).message}`);
  }
}

export interface ProxyConfigSources {
  /** --meshConfig; a missing file means the defaults. */
  meshConfigFile: string;
  /** The PROXY_CONFIG variable's value (empty = not set). */
  proxyConfigEnv: string;
  /** Downward-API annotations file; a missing file means no annotation. */
  annotationsFile?: string;
}

/** The effective ProxyConfig: defaults < mesh config defaultConfig < PROXY_CONFIG < annotation. */
export async function loadProxyConfig(src: ProxyConfigSources): Promise<ProxyConfig> {
  const layers: Partial<ProxyConfig>[] = [];
  const mesh = await readOptional(src.meshConfigFile);
  if (mesh !== undefined) layers.push(meshConfigOverlay(mesh, src.meshConfigFile));
  if (src.proxyConfigEnv.trim() !== '') layers.push(proxyConfigOverlay(parseText(src.proxyConfigEnv, 'PROXY_CONFIG'), 'PROXY_CONFIG'));
  const annotationsFile = src.annotationsFile ?? DEFAULT_ANNOTATIONS_FILE;
  const annotations = await readOptional(annotationsFile);
  if (annotations !== undefined) {
    const value = parseDownwardApiFile(annotations, annotationsFile)[PROXY_CONFIG_ANNOTATION];
    if (value !== undefined) {
      const source = `annotation ${PROXY_CONFIG_ANNOTATION} in ${annotationsFile}`;
      layers.push(proxyConfigOverlay(parseText(value, source), source));
    }
  }
  return mergeProxyConfig(PROXY_CONFIG_DEFAULTS, ...layers);
}

/**
 * ProxyConfig as the user writes it (durations as Go strings, readinessProbe as given), for node
 * metadata and logs: the discovery server reads PROXY_CONFIG.readinessProbe from it.
 */
export function proxyConfigJson(pc: ProxyConfig): JsonObject {
  const ms = (n: number) => formatDuration(BigInt(Math.round(n)) * 1_000_000n);
  const { readinessProbe, ...rest } = pc;
  return {
    ...rest,
    proxyMetadata: { ...pc.proxyMetadata },
    drainDuration: ms(pc.drainDuration),
    terminationDrainDuration: ms(pc.terminationDrainDuration),
    // A copy: a JSON value by construction (it was read from YAML or JSON).
    ...(readinessProbe ? { readinessProbe: structuredClone(readinessProbe) as unknown as JsonObject } : {}),
  };
}
