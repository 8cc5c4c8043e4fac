// The sidecar a Pod gets, as a JSON Patch (RFC 6902) on the Pod: the init container running
// `pilot-agent mesh-iptables` with capture flags from the template and the Pod's annotations, the
// proxy container running `pilot-agent proxy` (told its workload, see ./inject-workload.ts), their
// volumes, the canonical-service labels, and the status annotation that makes injection idempotent.
// Pure: Pod and template in, patch out; a bad annotation throws InjectionError.
import type { V1Container, V1EnvVar, V1Pod, V1Volume } from '@kubernetes/client-node';
import { parse as parseYaml } from 'yaml';
import { mergeProxyConfig, PROXY_CONFIG_ANNOTATION, PROXY_CONFIG_DEFAULTS, proxyConfigJson, proxyConfigOverlay, type ProxyConfig } from '../agent/mesh-config.js';
import {
  cidrList,
  EXCLUDE_INBOUND_PORTS,
  EXCLUDE_OUTBOUND_IP_RANGES,
  EXCLUDE_OUTBOUND_PORTS,
  INCLUDE_INBOUND_PORTS,
  INCLUDE_OUTBOUND_IP_RANGES,
  InjectionError,
  INTERCEPTION_MODE_ANNOTATION,
  interceptionMode,
  portList,
  STATUS_ANNOTATION,
} from './inject-policy.js';
import type { InjectionTemplate } from './inject-template.js';
import { canonicalLabels, workloadEnv, workloadMeta, type WorkloadMeta } from './inject-workload.js';
import { DEFAULT_REVISION, REVISION_LABEL } from '../config/revision.js';

export const PROXY_CONTAINER = 'mesh-proxy';
export const INIT_CONTAINER = 'mesh-init';
/** The label telling peers the workload speaks mutual TLS through its sidecar. */
import { MESH_TLS_MODE, TLS_MODE_LABEL } from '../networking/outbound-mtls.js';
export { TLS_MODE_LABEL };
/** The audience of the workload token the agent presents to the certificate authority (TOKEN_AUDIENCES' default). */
export const TOKEN_AUDIENCE = 'mesh-ca';
/** The fsGroup of ENABLE_LEGACY_FSGROUP_INJECTION: the proxy's gid, so it can read the token. */
export const LEGACY_FS_GROUP = 1337;

export interface InjectionContext {
  readonly template: InjectionTemplate;
  /** --clusterID, passed to the agent as MESH_META_CLUSTER_ID. */
  readonly clusterId: string;
  /** --domain: the agent's `--domain <namespace>.svc.<domain>`. */
  readonly domain: string;
  /** The mesh's trust domain, passed to the agent as TRUST_DOMAIN, as the Go mesh's template does from meshConfig.trustDomain. */
  readonly trustDomain?: string;
  /** ENABLE_LEGACY_FSGROUP_INJECTION. */
  readonly legacyFsGroup: boolean;
  /** REVISION: the `mesh.io/rev` label of injected Pods (default `default`, as the Go mesh labels them). */
  readonly revision?: string;
  /** The request's namespace: the Pod's workload is there when the Pod names none (default `default`). */
  readonly namespace?: string;
}

export interface JsonPatchOperation {
  op: 'add';
  path: string;
  value: unknown;
}

/** A JSON Pointer segment: `~` and `/` escaped. */
function pointer(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

const VOLUMES: V1Volume[] = [
  {
    name: 'mesh-podinfo',
    downwardAPI: {
      items: [
        { path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } },
        { path: 'annotations', fieldRef: { fieldPath: 'metadata.annotations' } },
      ],
    },
  },
  { name: 'mesh-token', projected: { sources: [{ serviceAccountToken: { audience: TOKEN_AUDIENCE, expirationSeconds: 43200, path: 'mesh-token' } }] } },
  { name: 'mesh-proxy-work', emptyDir: { medium: 'Memory' } },
  { name: 'mesh-config', configMap: { name: 'mesh', optional: true } },
];

const MOUNTS = [
  { name: 'mesh-podinfo', mountPath: '/etc/mesh/pod' },
  { name: 'mesh-token', mountPath: '/var/run/secrets/tokens' },
  { name: 'mesh-proxy-work', mountPath: '/etc/mesh/proxy' },
  { name: 'mesh-config', mountPath: '/etc/mesh/config' },
];

function fieldEnv(name: string, fieldPath: string): V1EnvVar {
  return { name, valueFrom: { fieldRef: { fieldPath } } };
}

/** The ProxyConfig of the workload: template defaults, then the Pod's `proxy.mesh.io/config`, then its interception mode. */
function workloadProxyConfig(pod: V1Pod, template: InjectionTemplate, mode: ProxyConfig['interceptionMode']): ProxyConfig {
  const annotation = pod.metadata?.annotations?.[PROXY_CONFIG_ANNOTATION];
  let overlay: Partial<ProxyConfig> = {};
  if (annotation !== undefined) {
    try {
      overlay = proxyConfigOverlay(parseYaml(annotation), `annotation ${PROXY_CONFIG_ANNOTATION}`);
    } catch (e) {
      const message = (e as Error).message;
      throw new InjectionError(message.startsWith('annotation') ? message : `annotation ${PROXY_CONFIG_ANNOTATION}: ${message.split('\n')[0]}`);
    }
  }
  return mergeProxyConfig(PROXY_CONFIG_DEFAULTS, template.proxyConfig, overlay, { interceptionMode: mode });
}

/** Merges a template map into a container: arrays (env, volumeMounts, ports) are appended, other fields replaced. */
function withTemplate(container: V1Container, extra: Record<string, unknown>): V1Container {
  const out: Record<string, unknown> = { ...container };
  for (const [key, value] of Object.entries(extra)) {
    const base = out[key];
    out[key] = Array.isArray(base) && Array.isArray(value) ? [...base, ...value] : value;
  }
  return out as unknown as V1Container;
}

/** The capture flags of `pilot-agent mesh-iptables`: the template's values, overridden by the Pod's annotations. */
function captureArgs(pod: V1Pod, ctx: InjectionContext, pc: ProxyConfig): string[] {
  const a = pod.metadata?.annotations ?? {};
  const t = ctx.template;
  const inbound = a[INCLUDE_INBOUND_PORTS] !== undefined ? portList(a[INCLUDE_INBOUND_PORTS], INCLUDE_INBOUND_PORTS, true) : t.includeInboundPorts;
  // The agent's own ports are never captured, whatever the Pod asks.
  const ownPorts = [pc.statusPort, pc.metricsPort].filter((p) => p > 0).map(String);
  const excludedInbound = [...ownPorts, t.excludeInboundPorts, a[EXCLUDE_INBOUND_PORTS] !== undefined ? portList(a[EXCLUDE_INBOUND_PORTS], EXCLUDE_INBOUND_PORTS, false) : ''];
  const includeRanges = a[INCLUDE_OUTBOUND_IP_RANGES] !== undefined ? cidrList(a[INCLUDE_OUTBOUND_IP_RANGES], INCLUDE_OUTBOUND_IP_RANGES) : t.includeOutboundIPRanges;
  const excludeRanges = a[EXCLUDE_OUTBOUND_IP_RANGES] !== undefined ? cidrList(a[EXCLUDE_OUTBOUND_IP_RANGES], EXCLUDE_OUTBOUND_IP_RANGES) : t.excludeOutboundIPRanges;
  const excludeOutPorts = a[EXCLUDE_OUTBOUND_PORTS] !== undefined ? portList(a[EXCLUDE_OUTBOUND_PORTS], EXCLUDE_OUTBOUND_PORTS, false) : t.excludeOutboundPorts;
  const join = (parts: string[]): string => [...new Set(parts.flatMap((p) => p.split(',')).filter(Boolean))].join(',');
  return [
    'mesh-iptables',
    '-p', '15001',
    '-z', '15006',
    '-u', String(t.proxyUid),
    '-g', String(t.proxyUid),
    '-m', pc.interceptionMode,
    '-i', includeRanges,
    '-x', excludeRanges,
    '-b', inbound,
    '-d', join(excludedInbound),
    '-o', excludeOutPorts,
  ];
}

function initContainer(pod: V1Pod, ctx: InjectionContext, pc: ProxyConfig): V1Container {
  return withTemplate(
    {
      name: INIT_CONTAINER,
      image: ctx.template.image,
      imagePullPolicy: ctx.template.imagePullPolicy,
      command: ['pilot-agent'],
      args: captureArgs(pod, ctx, pc),
      // Writing the rules needs NET_ADMIN and NET_RAW as root; nothing else.
      securityContext: {
        runAsUser: 0,
        runAsGroup: 0,
        runAsNonRoot: false,
        allowPrivilegeEscalation: false,
        privileged: false,
        readOnlyRootFilesystem: false,
        capabilities: { add: ['NET_ADMIN', 'NET_RAW'], drop: ['ALL'] },
      },
    },
    ctx.template.init,
  );
}

function proxyContainer(pod: V1Pod, ctx: InjectionContext, pc: ProxyConfig, workload: WorkloadMeta): V1Container {
  const app = pod.spec?.containers ?? [];
  const ports = app.flatMap((c) => c.ports ?? []);
  const uid = ctx.template.proxyUid;
  return withTemplate(
    {
      name: PROXY_CONTAINER,
      image: ctx.template.image,
      imagePullPolicy: ctx.template.imagePullPolicy,
      command: ['pilot-agent'],
      args: ['proxy', 'sidecar', '--domain', `$(POD_NAMESPACE).svc.${ctx.domain}`],
      workingDir: '/',
      env: [
        fieldEnv('POD_NAME', 'metadata.name'),
        fieldEnv('POD_NAMESPACE', 'metadata.namespace'),
        fieldEnv('INSTANCE_IP', 'status.podIP'),
        fieldEnv('SERVICE_ACCOUNT', 'spec.serviceAccountName'),
        { name: 'PROXY_CONFIG', value: JSON.stringify(proxyConfigJson(pc)) },
        { name: 'MESH_META_CLUSTER_ID', value: ctx.clusterId },
        ...workloadEnv(pod, workload),
        ...(ctx.trustDomain ? [{ name: 'TRUST_DOMAIN', value: ctx.trustDomain }] : []),
        { name: 'MESH_META_APP_CONTAINERS', value: app.map((c) => c.name).join(',') },
        { name: 'MESH_META_POD_PORTS', value: JSON.stringify(ports) },
      ],
      ports: pc.metricsPort > 0 ? [{ name: 'http-envoy-prom', containerPort: pc.metricsPort, protocol: 'TCP' }] : [],
      readinessProbe: { httpGet: { path: '/healthz/ready', port: pc.statusPort }, initialDelaySeconds: 1, periodSeconds: 2, failureThreshold: 30 },
      securityContext: {
        runAsUser: uid,
        runAsGroup: uid,
        runAsNonRoot: true,
        allowPrivilegeEscalation: false,
        privileged: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      },
      volumeMounts: MOUNTS,
    },
    ctx.template.proxy,
  );
}

/** Adds `items` to the array at `path`: the whole array when the Pod has none, else one append each. */
function appendAll(path: string, existing: unknown[] | undefined, items: unknown[]): JsonPatchOperation[] {
  if (!existing) return [{ op: 'add', path, value: items }];
  return items.map((value) => ({ op: 'add', path: `${path}/-`, value }));
}

/** Adds one key to the map at `path`, creating the map when the Pod has none. */
function addKey(path: string, existing: object | undefined, key: string, value: unknown): JsonPatchOperation {
  return existing ? { op: 'add', path: `${path}/${pointer(key)}`, value } : { op: 'add', path, value: { [key]: value } };
}

/** The patch that injects the sidecar into `pod`. */
export function injectionPatch(pod: V1Pod, ctx: InjectionContext): JsonPatchOperation[] {
  const modeAnnotation = pod.metadata?.annotations?.[INTERCEPTION_MODE_ANNOTATION];
  const mode = modeAnnotation !== undefined ? interceptionMode(modeAnnotation) : ctx.template.interceptionMode;
  const pc = workloadProxyConfig(pod, ctx.template, mode);
  const workload = workloadMeta(pod, ctx.namespace ?? '');
  const volumes = VOLUMES.filter((v) => !(pod.spec?.volumes ?? []).some((existing) => existing.name === v.name));
  const status = { initContainers: [INIT_CONTAINER], containers: [PROXY_CONTAINER], volumes: VOLUMES.map((v) => v.name) };
  const ops: JsonPatchOperation[] = [
    ...appendAll('/spec/initContainers', pod.spec?.initContainers, [initContainer(pod, ctx, pc)]),
    ...appendAll('/spec/containers', pod.spec?.containers, [proxyContainer(pod, ctx, pc, workload)]),
    ...appendAll('/spec/volumes', pod.spec?.volumes, volumes),
  ];
  if (ctx.legacyFsGroup && pod.spec?.securityContext?.fsGroup === undefined) {
    ops.push(addKey('/spec/securityContext', pod.spec?.securityContext, 'fsGroup', LEGACY_FS_GROUP));
  }
  ops.push(addKey('/metadata/labels', pod.metadata?.labels, TLS_MODE_LABEL, MESH_TLS_MODE));
  // The labels object exists after the first add.
  ops.push(addKey('/metadata/labels', {}, REVISION_LABEL, ctx.revision ?? DEFAULT_REVISION));
  for (const [key, value] of Object.entries(canonicalLabels(pod, workload))) ops.push(addKey('/metadata/labels', {}, key, value));
  ops.push(addKey('/metadata/annotations', pod.metadata?.annotations, STATUS_ANNOTATION, JSON.stringify(status)));
  return ops;
}
