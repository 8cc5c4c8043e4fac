// The injection template: what operators change without rebuilding (images, resources, security
// contexts, capture defaults, ProxyConfig defaults). It is a YAML file, in a cluster a ConfigMap
// mounted into the discovery server; the file is re-read when it changes and a broken edit keeps
// the last good template. Unlike the Go mesh's Go-template text, ours is data: the containers'
// shape (commands, flags, mounts) is built by ./inject-pod.ts, and the template's `proxy` and
// `init` maps are merged into the two containers (see docs/orchestrator.md).
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { proxyConfigOverlay, type ProxyConfig } from '../agent/mesh-config.js';
import { scope } from '../common/log.js';
import { cidrList, interceptionMode, portList } from './inject-policy.js';
import type { InterceptionMode } from '../model/proxy.js';

const log = scope('validationServer');

export interface InjectionTemplate {
  /** The image running pilot-agent (both containers). */
  image: string;
  imagePullPolicy: string;
  /** The proxy's uid and gid; its traffic is not captured. */
  proxyUid: number;
  /** Merged into the proxy container (resources, securityContext, extra env, ...). */
  proxy: Record<string, unknown>;
  /** Merged into the init container. */
  init: Record<string, unknown>;
  /** ProxyConfig defaults for injected workloads (e.g. discoveryAddress), below the Pod's annotation. */
  proxyConfig: Partial<ProxyConfig>;
  interceptionMode: InterceptionMode;
  includeInboundPorts: string;
  excludeInboundPorts: string;
  includeOutboundIPRanges: string;
  excludeOutboundIPRanges: string;
  excludeOutboundPorts: string;
}

export const DEFAULT_TEMPLATE: Readonly<InjectionTemplate> = Object.freeze({
  image: 'mesh/pilot-agent:latest',
  imagePullPolicy: 'IfNotPresent',
  proxyUid: 1337,
  proxy: { resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { cpu: '2', memory: '1Gi' } } },
  init: { resources: { requests: { cpu: '10m', memory: '10Mi' }, limits: { cpu: '100m', memory: '50Mi' } } },
  proxyConfig: {},
  interceptionMode: 'REDIRECT',
  includeInboundPorts: '*',
  excludeInboundPorts: '',
  includeOutboundIPRanges: '*',
  excludeOutboundIPRanges: '',
  excludeOutboundPorts: '',
});

function record(value: unknown, field: string, file: string): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${file}: ${field}: expected a map`);
  return value as Record<string, unknown>;
}

function text(value: unknown, field: string, file: string, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string') throw new Error(`${file}: ${field}: expected a string, got ${JSON.stringify(value)}`);
  return value;
}

/** Parses a template; every error names the file and the field. Absent fields keep the defaults. */
export function parseTemplate(source: string, file: string): InjectionTemplate {
  const doc = record(parseYaml(source) ?? {}, 'the document', file);
  const known = new Set(Object.keys(DEFAULT_TEMPLATE));
  for (const key of Object.keys(doc)) if (!known.has(key)) throw new Error(`${file}: unknown field "${key}"; expected one of ${[...known].join(', ')}`);
  const uid = doc['proxyUid'] ?? DEFAULT_TEMPLATE.proxyUid;
  if (typeof uid !== 'number' || !Number.isInteger(uid) || uid < 0) throw new Error(`${file}: proxyUid: expected a non-negative integer, got ${JSON.stringify(uid)}`);
  try {
    return {
      image: text(doc['image'], 'image', file, DEFAULT_TEMPLATE.image),
      imagePullPolicy: text(doc['imagePullPolicy'], 'imagePullPolicy', file, DEFAULT_TEMPLATE.imagePullPolicy),
      proxyUid: uid,
      proxy: doc['proxy'] === undefined ? DEFAULT_TEMPLATE.proxy : record(doc['proxy'], 'proxy', file),
      init: doc['init'] === undefined ? DEFAULT_TEMPLATE.init : record(doc['init'], 'init', file),
      proxyConfig: proxyConfigOverlay(doc['proxyConfig'] ?? {}, `${file}, proxyConfig`),
      interceptionMode: interceptionMode(text(doc['interceptionMode'], 'interceptionMode', file, DEFAULT_TEMPLATE.interceptionMode)),
      includeInboundPorts: portList(text(doc['includeInboundPorts'], 'includeInboundPorts', file, '*'), 'includeInboundPorts', true),
      excludeInboundPorts: portList(text(doc['excludeInboundPorts'], 'excludeInboundPorts', file, ''), 'excludeInboundPorts', false),
      includeOutboundIPRanges: cidrList(text(doc['includeOutboundIPRanges'], 'includeOutboundIPRanges', file, '*'), 'includeOutboundIPRanges'),
      excludeOutboundIPRanges: cidrList(text(doc['excludeOutboundIPRanges'], 'excludeOutboundIPRanges', file, ''), 'excludeOutboundIPRanges'),
      excludeOutboundPorts: portList(text(doc['excludeOutboundPorts'], 'excludeOutboundPorts', file, ''), 'excludeOutboundPorts', false),
    };
  } catch (e) {
    const message = (e as Error).message;
    // The checks shared with the Pod annotations name the field; the file is added here.
    throw new Error(message.startsWith(file) ? message : `${file}: ${message}`);
  }
}

/** The template file, watched: `current()` is the last good version (the defaults when there is no file). */
export class TemplateFile {
  private template: InjectionTemplate = { ...DEFAULT_TEMPLATE };
  private watcher: FSWatcher | undefined;
  private reading: Promise<void> = Promise.resolve();
  /** Why the last re-read was refused; '' after a good one. */
  lastError = '';

  constructor(private readonly file: string | undefined) {}

  current(): InjectionTemplate {
    return this.template;
  }

  /** Reads the file (a bad first version fails startup) and watches its directory, where a ConfigMap's files are swapped. */
  async start(): Promise<void> {
    if (!this.file) return;
    this.template = parseTemplate(await readFile(this.file, 'utf8'), this.file);
    log.info(`injection template read from ${this.file}`);
    const name = basename(this.file);
    this.watcher = watch(dirname(this.file), (_event, changed) => {
      // A ConfigMap update swaps a `..data` symlink, not the file itself.
      if (changed === null || changed === name || changed.startsWith('..')) this.reading = this.reading.then(() => this.reload());
    });
  }

  /** Re-reads the file; a bad version is logged and the last good template stays. Resolves when pending reads are done. */
  async reload(): Promise<void> {
    if (!this.file) return;
    try {
      const next = parseTemplate(await readFile(this.file, 'utf8'), this.file);
      this.lastError = '';
      if (JSON.stringify(next) === JSON.stringify(this.template)) return;
      this.template = next;
      log.info(`injection template re-read from ${this.file}`);
    } catch (e) {
      this.lastError = (e as Error).message;
      log.error(`injection template: ${this.lastError}; keeping the last good template`);
    }
  }

  close(): void {
    this.watcher?.close();
  }
}
