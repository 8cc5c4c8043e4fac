// Semantic rules per kind, the checks a schema cannot express (URL shapes, IPs, condition keys,
// cross-field constraints). They run even when the structure has errors so that every problem of a
// resource is reported at once; hence they read the spec defensively and skip ill-typed parts,
// which the structural check already reports.

import { STATUS_CODES } from 'node:http';
import { joinPath, type Issue } from './errors.js';
import {
  checkDuration,
  checkExportTo,
  checkHeaderName,
  checkHost,
  checkHttpUrl,
  checkIp,
  checkIpOrCidr,
  checkJwks,
  checkLabelKey,
  checkLabelValue,
  checkPortString,
} from './syntax.js';
import type { Kind } from './types.js';
import { asRecord, type Fields } from './values.js';
import { setting } from '../common/env.js';
import { RETRY_CONDITIONS } from '../envoy/retry-conditions.js';
import { destinationRuleTls } from './client-tls.js';
import { destinationRuleLocality } from './locality-lb.js';
import { destinationRuleBalancer } from './load-balancer.js';
import { destinationRuleLevelSettings } from './rule-level-settings.js';
import { destinationRuleTunnel } from './tunnel.js';
import { serverTls } from './server-tls.js';
import { telemetryMetrics } from './telemetry-metrics.js';

type Check = (value: string) => string | undefined;

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function asString(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** Collects issues for one resource; every rule appends here. */
class Findings {
  readonly issues: Issue[] = [];

  add(path: string, message: string): void {
    this.issues.push({ path, message });
  }

  /** Runs `check` on a string at `path` if present. */
  string(value: unknown, path: string, check: Check): void {
    const text = asString(value);
    if (text === undefined) return;
    const problem = check(text);
    if (problem !== undefined) this.add(path, problem);
  }

  /** Runs `check` on every string of a list. */
  strings(value: unknown, path: string, check: Check): void {
    asArray(value).forEach((item, i) => this.string(item, joinPath(path, i), check));
  }

  labels(value: unknown, path: string): void {
    for (const [key, labelValue] of Object.entries(asRecord(value) ?? {})) {
      const at = joinPath(path, key);
      const keyProblem = checkLabelKey(key);
      if (keyProblem !== undefined) this.add(at, keyProblem);
      this.string(labelValue, at, checkLabelValue);
    }
  }

  unique(values: unknown[], path: (i: number) => string, what: string): void {
    const seen = new Set<unknown>();
    values.forEach((value, i) => {
      if (value === undefined) return;
      if (seen.has(value)) this.add(path(i), `duplicate ${what} ${JSON.stringify(value)}`);
      seen.add(value);
    });
  }
}

const nonEmpty: Check = (value) => (value.trim() === '' ? 'must not be empty' : undefined);

// ------------------------------------------------------------------ security

function requestAuthentication(spec: Fields, path: string, out: Findings): void {
  out.labels(asRecord(spec['selector'])?.['matchLabels'], `${path}.selector.matchLabels`);
  asArray(spec['jwtRules']).forEach((item, i) => {
    const rule = asRecord(item);
    if (rule === undefined) return;
    const at = joinPath(`${path}.jwtRules`, i);
    out.string(rule['jwksUri'], `${at}.jwksUri`, checkHttpUrl);
    out.string(rule['jwks'], `${at}.jwks`, checkJwks);
    if (rule['jwks'] !== undefined && rule['jwksUri'] !== undefined) {
      out.add(`${at}.jwks`, 'jwks and jwksUri are mutually exclusive; set only one');
    }
    out.string(rule['timeout'], `${at}.timeout`, checkDuration);
    out.string(rule['outputPayloadToHeader'], `${at}.outputPayloadToHeader`, checkHeaderName);
    out.strings(rule['audiences'], `${at}.audiences`, nonEmpty);
    out.strings(rule['fromParams'], `${at}.fromParams`, nonEmpty);
    out.strings(rule['fromCookies'], `${at}.fromCookies`, nonEmpty);
    asArray(rule['fromHeaders']).forEach((h, j) =>
      out.string(asRecord(h)?.['name'], `${joinPath(`${at}.fromHeaders`, j)}.name`, checkHeaderName),
    );
    asArray(rule['outputClaimToHeaders']).forEach((h, j) =>
      out.string(asRecord(h)?.['header'], `${joinPath(`${at}.outputClaimToHeaders`, j)}.header`, checkHeaderName),
    );
  });
}

const CLAIM_KEY = /^request\.auth\.claims(\[[^[\]]+\])+$/;
const HEADER_KEY = /^request\.headers\[[^[\]]+\]$/;
/**
 * Fixed condition keys, with the check their values must pass. A Map, not an object: the key is
 * the user's string, and `constructor` or `__proto__` must not find Object.prototype's members.
 */
const FIXED_KEYS: ReadonlyMap<string, Check> = new Map([
  ['request.auth.principal', nonEmpty],
  ['request.auth.audiences', nonEmpty],
  ['request.auth.presenter', nonEmpty],
  ['source.ip', checkIpOrCidr],
  ['remote.ip', checkIpOrCidr],
  ['source.namespace', nonEmpty],
  ['source.principal', nonEmpty],
  ['destination.ip', checkIpOrCidr],
  ['destination.port', checkPortString],
  ['connection.sni', nonEmpty],
]);
const KNOWN_KEYS = ['request.auth.claims[<name>]', 'request.headers[<name>]', ...FIXED_KEYS.keys()].join(', ');

function condition(item: unknown, at: string, out: Findings): void {
  const cond = asRecord(item);
  if (cond === undefined) return;
  const key = asString(cond['key']);
  let valueCheck: Check = nonEmpty;
  if (key !== undefined && key !== '') {
    const fixed = FIXED_KEYS.get(key);
    if (fixed !== undefined) valueCheck = fixed;
    else if (!CLAIM_KEY.test(key) && !HEADER_KEY.test(key)) {
      out.add(`${at}.key`, `unknown key ${JSON.stringify(key)}; expected one of ${KNOWN_KEYS}`);
    }
  }
  const values = asArray(cond['values']);
  const notValues = asArray(cond['notValues']);
  if (values.length === 0 && notValues.length === 0) out.add(at, 'a condition needs at least one of values or notValues');
  out.strings(values, `${at}.values`, valueCheck);
  out.strings(notValues, `${at}.notValues`, valueCheck);
}

const IP_FIELDS = new Set(['ipBlocks', 'notIpBlocks', 'remoteIpBlocks', 'notRemoteIpBlocks']);
const PORT_FIELDS = new Set(['ports', 'notPorts']);

/** A `source` or `operation`: at least one field set; entries non-empty and well-formed. */
function matchBlock(value: unknown, at: string, out: Findings): void {
  const block = asRecord(value);
  if (block === undefined) return;
  if (Object.keys(block).length === 0) out.add(at, 'must set at least one field');
  for (const [field, list] of Object.entries(block)) {
    const check = IP_FIELDS.has(field) ? checkIpOrCidr : PORT_FIELDS.has(field) ? checkPortString : nonEmpty;
    out.strings(list, joinPath(at, field), (v) => nonEmpty(v) ?? check(v));
  }
}

function authorizationPolicy(spec: Fields, path: string, out: Findings): void {
  out.labels(asRecord(spec['selector'])?.['matchLabels'], `${path}.selector.matchLabels`);
  const action = asString(spec['action']) ?? 'ALLOW';
  if (action === 'CUSTOM' && spec['provider'] === undefined) {
    out.add(`${path}.provider`, 'required when action is CUSTOM');
  }
  if (action !== 'CUSTOM' && spec['provider'] !== undefined) {
    out.add(`${path}.provider`, `only allowed with action CUSTOM, not ${action}`);
  }
  asArray(spec['rules']).forEach((item, i) => {
    const rule = asRecord(item);
    if (rule === undefined) return;
    const at = joinPath(`${path}.rules`, i);
    asArray(rule['from']).forEach((f, j) => matchBlock(asRecord(f)?.['source'], `${joinPath(`${at}.from`, j)}.source`, out));
    asArray(rule['to']).forEach((t, j) => matchBlock(asRecord(t)?.['operation'], `${joinPath(`${at}.to`, j)}.operation`, out));
    asArray(rule['when']).forEach((c, j) => condition(c, joinPath(`${at}.when`, j), out));
  });
}

function peerAuthentication(spec: Fields, path: string, out: Findings): void {
  out.labels(asRecord(spec['selector'])?.['matchLabels'], `${path}.selector.matchLabels`);
  const portLevel = asRecord(spec['portLevelMtls']);
  if (portLevel === undefined) return;
  for (const port of Object.keys(portLevel)) {
    const problem = checkPortString(port);
    if (problem !== undefined) out.add(joinPath(`${path}.portLevelMtls`, port), problem);
  }
  const matchLabels = asRecord(asRecord(spec['selector'])?.['matchLabels']);
  if (Object.keys(portLevel).length > 0 && Object.keys(matchLabels ?? {}).length === 0) {
    out.add(`${path}.portLevelMtls`, 'requires a workload selector (spec.selector.matchLabels)');
  }
}

// ------------------------------------------------------------------ networking

/** Fields shared by WorkloadEntry specs, ServiceEntry endpoints and WorkloadGroup templates. */
function workloadFields(entry: Fields, at: string, out: Findings): void {
  out.labels(entry['labels'], `${at}.labels`);
  const address = asString(entry['address']);
  if (address !== undefined && !address.startsWith('unix://')) {
    out.string(address, `${at}.address`, (v) => (checkIp(v) === undefined ? undefined : checkHost(v)));
  }
}

function serviceEntry(spec: Fields, path: string, out: Findings): void {
  out.strings(spec['hosts'], `${path}.hosts`, checkHost);
  out.strings(spec['addresses'], `${path}.addresses`, checkIpOrCidr);
  out.strings(spec['exportTo'], `${path}.exportTo`, checkExportTo);
  out.labels(asRecord(spec['workloadSelector'])?.['labels'], `${path}.workloadSelector.labels`);
  const ports = asArray(spec['ports']).map(asRecord);
  out.unique(ports.map((p) => p?.['number']), (i) => `${joinPath(`${path}.ports`, i)}.number`, 'port number');
  out.unique(ports.map((p) => p?.['name']), (i) => `${joinPath(`${path}.ports`, i)}.name`, 'port name');
  const portNames = new Set(ports.map((p) => asString(p?.['name'])).filter((n) => n !== undefined));
  const endpoints = asArray(spec['endpoints']);
  if (endpoints.length > 0 && spec['workloadSelector'] !== undefined) {
    out.add(`${path}.workloadSelector`, 'cannot be combined with endpoints; use one of them');
  }
  const resolution = asString(spec['resolution']) ?? 'NONE';
  if (resolution === 'DNS' || resolution === 'DNS_ROUND_ROBIN') {
    if (endpoints.length === 0) {
      out.strings(spec['hosts'], `${path}.hosts`, (h) => (h.includes('*') ? `wildcard host ${JSON.stringify(h)} needs endpoints with resolution ${resolution}` : undefined));
    }
  }
  endpoints.forEach((item, i) => {
    const endpoint = asRecord(item);
    if (endpoint === undefined) return;
    const at = joinPath(`${path}.endpoints`, i);
    workloadFields(endpoint, at, out);
    if (resolution === 'STATIC') {
      const address = asString(endpoint['address']);
      if (address === undefined) out.add(`${at}.address`, 'required with resolution STATIC');
      else if (!address.startsWith('unix://')) out.string(address, `${at}.address`, checkIp);
    }
    for (const name of Object.keys(asRecord(endpoint['ports']) ?? {})) {
      if (!portNames.has(name)) out.add(joinPath(`${at}.ports`, name), `no port named ${JSON.stringify(name)} in spec.ports`);
    }
  });
}

function workloadEntry(spec: Fields, path: string, out: Findings): void {
  workloadFields(spec, path, out);
  if (spec['address'] === undefined && spec['network'] === undefined) {
    out.add(`${path}.address`, 'required unless network is set');
  }
}

function workloadGroup(spec: Fields, path: string, out: Findings): void {
  out.labels(asRecord(spec['metadata'])?.['labels'], `${path}.metadata.labels`);
  const template = asRecord(spec['template']);
  if (template !== undefined) {
    workloadFields(template, `${path}.template`, out);
    if (template['address'] !== undefined) out.add(`${path}.template.address`, 'must not be set: each workload registers its own address');
  }
  const probe = asRecord(spec['probe']);
  if (probe !== undefined) {
    const kinds = ['httpGet', 'tcpSocket', 'exec', 'grpc'].filter((k) => probe[k] !== undefined);
    if (kinds.length !== 1) out.add(`${path}.probe`, `expected exactly one of httpGet, tcpSocket, exec, grpc; got ${kinds.length}`);
  }
}

const DEFAULT_ENDPOINT = /^(127\.0\.0\.1|0\.0\.0\.0|\[::1\]|\[::\]):(\d+)$/;
const EGRESS_HOST = /^([^/]+)\/(.+)$/;

function sidecar(spec: Fields, path: string, out: Findings): void {
  out.labels(asRecord(spec['workloadSelector'])?.['labels'], `${path}.workloadSelector.labels`);
  const ingress = asArray(spec['ingress']).map(asRecord);
  out.unique(ingress.map((l) => asRecord(l?.['port'])?.['number']), (i) => `${joinPath(`${path}.ingress`, i)}.port.number`, 'ingress port');
  ingress.forEach((listener, i) => {
    out.string(listener?.['defaultEndpoint'], `${joinPath(`${path}.ingress`, i)}.defaultEndpoint`, (v) => {
      const match = DEFAULT_ENDPOINT.exec(v);
      if (v.startsWith('unix://') || (match && checkPortString(match[2]!) === undefined)) return undefined;
      return `invalid defaultEndpoint ${JSON.stringify(v)}; expected 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port> or unix://<path>`;
    });
    trafficDurations(listener?.['connectionPool'], `${joinPath(`${path}.ingress`, i)}.connectionPool`, out);
  });
  trafficDurations(spec['inboundConnectionPool'], `${path}.inboundConnectionPool`, out);
  asArray(spec['egress']).forEach((item, i) => {
    out.strings(asRecord(item)?.['hosts'], `${joinPath(`${path}.egress`, i)}.hosts`, (v) => {
      const match = EGRESS_HOST.exec(v);
      if (match && (match[2] === '*' || checkHost(match[2]!) === undefined)) return undefined;
      return `invalid egress host ${JSON.stringify(v)}; expected <namespace>/<dns name>, e.g. ./*, */*, mesh-system/*`;
    });
  });
}

/** Traffic fields that hold a duration (`1.5s`), wherever they appear in a rule's sub-tree. */
const TRAFFIC_DURATIONS = new Set(['timeout', 'perTryTimeout', 'fixedDelay', 'maxAge', 'connectTimeout', 'idleTimeout', 'maxConnectionDuration', 'interval', 'time', 'baseEjectionTime', 'ttl', 'warmupDurationSecs', 'duration', 'backoff', 'budgetInterval']);
/** Maps keyed by user names (a header called `timeout` is not a duration). */
const USER_KEYED = new Set(['headers', 'withoutHeaders', 'queryParams', 'sourceLabels', 'labels']);

/** The translation reads these as durations: a bad one is refused here rather than breaking a push. */
function trafficDurations(value: unknown, path: string, out: Findings): void {
  if (Array.isArray(value)) return value.forEach((v, i) => trafficDurations(v, joinPath(path, i), out));
  const rec = asRecord(value);
  if (!rec) return;
  for (const [k, v] of Object.entries(rec)) {
    if (TRAFFIC_DURATIONS.has(k) && typeof v === 'string') out.string(v, `${path}.${k}`, checkDuration);
    else if (!USER_KEYED.has(k)) trafficDurations(v, `${path}.${k}`, out);
  }
}

const INHERITANCE = 'PILOT_ENABLE_DESTINATION_RULE_INHERITANCE';

/**
 * A DestinationRule without host is the Go mesh's mesh/namespace-wide rule: accepted only with
 * inheritance on, and then (as there) without the fields that only make sense for one host.
 */
function hostlessRule(spec: Fields, path: string, out: Findings): void {
  if (!setting(INHERITANCE)) {
    out.add(`${path}.host`, `required; a DestinationRule without host (mesh/namespace-wide defaults) needs ${INHERITANCE}=true`);
    return;
  }
  const tp = asRecord(spec['trafficPolicy']);
  const forbidden: [unknown, string][] = [[spec['workloadSelector'], 'workloadSelector'], [spec['subsets'], 'subsets'], [spec['exportTo'], 'exportTo'], [tp?.['portLevelSettings'], 'trafficPolicy.portLevelSettings']];
  for (const [value, field] of forbidden) {
    if (value !== undefined && !(Array.isArray(value) && value.length === 0)) out.add(`${path}.${field}`, 'a mesh/namespace-wide DestinationRule (without host) cannot set it');
  }
}

function destinationRule(spec: Fields, path: string, out: Findings): void {
  if (spec['host'] === undefined || spec['host'] === '') hostlessRule(spec, path, out);
  else out.string(spec['host'], `${path}.host`, checkHost);
  trafficDurations(spec['trafficPolicy'], `${path}.trafficPolicy`, out);
  trafficDurations(spec['subsets'], `${path}.subsets`, out);
  destinationRuleTls(spec, path, (p, m) => out.add(p, m));
  destinationRuleLocality(spec, path, (p, m) => out.add(p, m));
  destinationRuleBalancer(spec, path, (p, m) => out.add(p, m));
  destinationRuleLevelSettings(spec, path, (p, m) => out.add(p, m));
  destinationRuleTunnel(spec, path, (p, m) => out.add(p, m));
  out.strings(spec['exportTo'], `${path}.exportTo`, checkExportTo);
  const subsets = asArray(spec['subsets']).map(asRecord);
  out.unique(subsets.map((s) => s?.['name']), (i) => `${joinPath(`${path}.subsets`, i)}.name`, 'subset name');
  subsets.forEach((s, i) => out.labels(s?.['labels'], `${joinPath(`${path}.subsets`, i)}.labels`));
}

/** A retryOn entry: one of Envoy's retry conditions, or an HTTP status code (a retriable status). */
export const checkRetryOn: Check = (value) => {
  const bad = value.split(',').map((p) => p.trim()).filter((p) => p !== '' && !RETRY_CONDITIONS.has(p) && !(/^\d+$/.test(p) && STATUS_CODES[Number(p)] !== undefined));
  if (bad.length === 0) return undefined;
  return `${bad.map((p) => JSON.stringify(p)).join(', ')} ${bad.length === 1 ? 'is not a valid retryOn policy' : 'are not valid retryOn policies'}; expected HTTP status codes or Envoy's retry conditions: ${[...RETRY_CONDITIONS].join(', ')}`;
};

/** A route's retries, as the Go mesh checks them: attempts not negative, nothing else set when they are 0, a retryOn the proxies evaluate. */
function httpRetry(value: unknown, at: string, out: Findings): void {
  const r = asRecord(value);
  if (!r) return;
  const attempts = r['attempts'];
  if (typeof attempts === 'number' && attempts < 0) out.add(`${at}.attempts`, 'cannot be negative');
  const set = ['perTryTimeout', 'retryOn', 'retryRemoteLocalities'].filter((k) => r[k] !== undefined);
  if (attempts === 0 && set.length > 0) out.add(`${at}.attempts`, `is 0 (retries disabled) while ${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set`);
  out.string(r['retryOn'], `${at}.retryOn`, checkRetryOn);
}

function virtualService(spec: Fields, path: string, out: Findings): void {
  out.strings(spec['hosts'], `${path}.hosts`, checkHost);
  out.strings(spec['exportTo'], `${path}.exportTo`, checkExportTo);
  trafficDurations(spec['http'], `${path}.http`, out);
  asArray(spec['http']).forEach((item, i) => {
    const route = asRecord(item);
    const at = joinPath(`${path}.http`, i);
    if (route?.['delegate'] !== undefined && route['route'] !== undefined) {
      out.add(`${at}.delegate`, 'cannot be combined with route; a delegating rule routes through the delegate');
    }
    httpRetry(route?.['retries'], `${at}.retries`, out);
    directResponse(route?.['directResponse'], `${at}.directResponse`, out);
    unsupportedFaults(route?.['fault'], `${at}.fault`, out);
  });
}

/** What the Go mesh's validation refuses of a fault: an exponential delay, an HTTP/2 error abort (neither has a translation). */
function unsupportedFaults(value: unknown, at: string, out: Findings): void {
  const f = asRecord(value);
  if (asRecord(f?.['delay'])?.['exponentialDelay'] !== undefined) out.add(`${at}.delay.exponentialDelay`, 'exponentialDelay is not supported; use fixedDelay');
  if (asRecord(f?.['abort'])?.['http2Error'] !== undefined) out.add(`${at}.abort.http2Error`, 'HTTP/2 abort fault injection is not supported; use httpStatus or grpcStatus');
}

function directResponse(value: unknown, at: string, out: Findings): void {
  const r = asRecord(value);
  if (!r) return;
  const status = r['status'];
  if (typeof status === 'number' && (status < 200 || status > 599)) out.add(`${at}.status`, `${status} is not in the range 200-599`);
}

function gateway(spec: Fields, path: string, out: Findings): void {
  out.labels(spec['selector'], `${path}.selector`);
  asArray(spec['servers']).forEach((item, i) => {
    const at = joinPath(`${path}.servers`, i);
    out.strings(asRecord(item)?.['hosts'], `${at}.hosts`, (v) => {
      const host = v.includes('/') ? v.slice(v.indexOf('/') + 1) : v;
      return checkHost(host);
    });
    const server = asRecord(item);
    if (server) serverTls(server, at, out);
  });
}

/** As the Go mesh's validation: a Telemetry picks its workloads by selector or by targetRefs, not both. */
function telemetry(spec: Fields, path: string, out: Findings): void {
  out.labels(asRecord(spec['selector'])?.['matchLabels'], `${path}.selector.matchLabels`);
  if (spec['selector'] !== undefined && asArray(spec['targetRefs']).length > 0) out.add(`${path}.targetRefs`, 'only one of targetRefs or selector can be set');
  telemetryMetrics(spec, path, (p, m) => out.add(p, m));
}

const RULES: Readonly<Record<Kind, (spec: Fields, path: string, out: Findings) => void>> = {
  RequestAuthentication: requestAuthentication,
  AuthorizationPolicy: authorizationPolicy,
  PeerAuthentication: peerAuthentication,
  ServiceEntry: serviceEntry,
  WorkloadEntry: workloadEntry,
  WorkloadGroup: workloadGroup,
  Sidecar: sidecar,
  DestinationRule: destinationRule,
  VirtualService: virtualService,
  Gateway: gateway,
  Telemetry: telemetry,
};

/** Semantic issues of a spec; ill-typed parts are skipped (the structural check reports them). */
export function checkSemantics(kind: Kind, spec: unknown, path: string): Issue[] {
  const fields = asRecord(spec);
  if (fields === undefined) return [];
  const out = new Findings();
  RULES[kind](fields, path, out);
  return out.issues;
}

/** Label map check for metadata, shared with the envelope validation. */
export function checkLabels(labels: unknown, path: string): Issue[] {
  const out = new Findings();
  out.labels(labels, path);
  return out.issues;
}
