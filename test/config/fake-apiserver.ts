// A stand-in for the orchestrator's API server, speaking its wire protocol for custom resources:
// list (`{kind: XList, metadata.resourceVersion, items}`), and watch (`?watch=true`) as JSON lines
// of `{type, object}` with ADDED/MODIFIED/DELETED/BOOKMARK, resuming from `resourceVersion`, and an
// ERROR event carrying a 410 Status when that version has been compacted away. Core resources are
// served under `/api/v1`, others under `/apis/<group>/<version>`; cluster-scoped kinds (Node,
// Namespace, IngressClass, webhook configurations) have no namespace. `metadata.creationTimestamp`
// is kept as the test gives it (the real server sets it on create).
//
// A collection: POST creates (409 AlreadyExists when the name is taken). One object: GET; PUT (an
// update: `metadata.resourceVersion` required and must be current, else 409 Conflict) and PATCH
// (`application/json-patch+json` or `application/merge-patch+json`; strategic merge is refused with
// 415 as for custom resources). As with a CRD that enables the status
// subresource, the `/status` path changes only `status`, the object's own path ignores `status`,
// and `metadata.generation` counts changes of everything but metadata and status.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import fastJsonPatch, { type Operation } from 'fast-json-patch';
import { selfSignedCertificate } from '../../src/webhooks/selfsigned.js';
import { BUILTIN_PLURALS, discovery } from './fake-apiserver-kinds.js';

const { applyPatch } = fastJsonPatch;

/** RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything else replaces. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** What `metadata.generation` follows: everything but metadata and status. */
function specOf(object: StoredObject): string {
  const { metadata: _m, status: _s, ...rest } = object;
  return JSON.stringify(rest);
}

export interface StoredObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; [field: string]: unknown };
  spec?: unknown;
  [field: string]: unknown;
}

interface HistoryEntry {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: StoredObject;
}

interface Watcher {
  group: string;
  plural: string;
  namespace: string | undefined;
  bookmarks: boolean;
  res: ServerResponse;
}

export interface RecordedRequest {
  method: string;
  path: string;
  watch: boolean;
  resourceVersion: string | null;
  allowWatchBookmarks: string | null;
}

const TOKEN = 'stand-in-token';
const PATH = /^\/(?:api|apis\/([^/]+))\/([^/]+)\/(?:namespaces\/([^/]+)\/)?([^/]+)$/;
/** One object (GET, PUT, PATCH), or its status subresource with `/status`. */
const OBJECT_PATH = /^\/(?:api|apis\/([^/]+))\/([^/]+)\/(?:namespaces\/([^/]+)\/)?([^/]+)\/([^/]+?)(\/status)?$/;
const PATCH_TYPES = new Set(['application/json-patch+json', 'application/merge-patch+json']);

export class FakeApiServer {
  readonly requests: RecordedRequest[] = [];
  private readonly objects = new Map<string, StoredObject>();
  private history: HistoryEntry[] = [];
  private rv = 100;
  /** Watches from a version below this get 410 Gone. */
  private compactedBelow = 0;
  private readonly watchers = new Set<Watcher>();
  private failures: number[] = [];
  private readonly interleaved: Array<{ change: () => void; path: string }> = [];
  /** Resource plurals answered with 404, as for a CRD that is not installed. */
  private readonly unserved = new Set<string>();
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly pluralOf: (kind: string) => string) {}

  /** Serves HTTPS as the real server does (clients such as kubectl send bearer tokens only over TLS). */
  async start(): Promise<void> {
    const { certPem, keyPem } = await selfSignedCertificate(['localhost']);
    const server = createServer({ cert: certPem, key: keyPem }, (req, res) => this.handle(req, res));
    // Every socket, also those still in the TLS handshake (closeAllConnections knows only HTTP ones).
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  }

  url(): string {
    return `https://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  /** A kubeconfig that points at this server with its bearer token (a self-signed certificate, hence skip-verify). */
  kubeconfig(): string {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      `- name: stand-in\n  cluster:\n    server: ${this.url()}\n    insecure-skip-tls-verify: true`,
      'users:',
      `- name: tester\n  user:\n    token: ${TOKEN}`,
      'contexts:',
      '- name: ctx\n  context:\n    cluster: stand-in\n    user: tester',
      'current-context: ctx',
      '',
    ].join('\n');
  }

  async close(): Promise<void> {
    this.dropWatches();
    const server = this.server;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  /** Creates or updates an object and notifies watchers (unless `silently`, to model a missed event). */
  put(object: StoredObject, silently = false): void {
    const key = this.keyOf(object);
    const type = this.objects.has(key) ? 'MODIFIED' : 'ADDED';
    const stored = structuredClone(object);
    const old = this.objects.get(key);
    stored.metadata.resourceVersion = String(++this.rv);
    stored.metadata['generation'] = old === undefined ? 1 : Number(old.metadata['generation'] ?? 1) + (specOf(old) === specOf(stored) ? 0 : 1);
    this.objects.set(key, stored);
    if (!silently) this.publish({ rv: this.rv, type, object: stored });
  }

  remove(object: StoredObject, silently = false): void {
    const key = this.keyOf(object);
    const stored = this.objects.get(key);
    if (!stored) return;
    this.objects.delete(key);
    const gone = { ...structuredClone(stored), metadata: { ...stored.metadata, resourceVersion: String(++this.rv) } };
    if (!silently) this.publish({ rv: this.rv, type: 'DELETED', object: gone });
  }

  /** Sends a BOOKMARK with the current version to watchers that asked for bookmarks. */
  bookmark(): string {
    const version = String(++this.rv);
    for (const w of this.watchers) {
      if (w.bookmarks) this.send(w.res, { type: 'BOOKMARK', object: { apiVersion: '', kind: '', metadata: { resourceVersion: version } } });
    }
    return version;
  }

  /** Forgets history: watches resuming from a version before the current one get 410 Gone. */
  compact(): void {
    this.history = [];
    this.compactedBelow = this.rv;
  }

  /** Ends every open watch stream, as a restarting server or a broken connection would. */
  dropWatches(): void {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  /** The next requests fail with these statuses, in order. */
  failNext(...statuses: number[]): void {
    this.failures.push(...statuses);
  }

  /** Runs `change` just before the next PUT or PATCH whose path ends with `path` is applied, as a concurrent writer would. */
  interleave(change: () => void, path = ''): void {
    this.interleaved.push({ change, path });
  }

  unserve(plural: string): void {
    this.unserved.add(plural);
  }

  openWatches(): number {
    return this.watchers.size;
  }

  private keyOf(object: StoredObject): string {
    const group = object.apiVersion.includes('/') ? object.apiVersion.split('/')[0]! : '';
    const plural = BUILTIN_PLURALS[object.kind] ?? this.pluralOf(object.kind);
    return `${group}/${plural}/${object.metadata.namespace ?? ''}/${object.metadata.name}`;
  }

  /** The stored object, as a GET would return it. */
  get(object: Pick<StoredObject, 'apiVersion' | 'kind' | 'metadata'>): StoredObject | undefined {
    const stored = this.objects.get(this.keyOf(object as StoredObject));
    return stored && structuredClone(stored);
  }

  private matches(object: StoredObject, group: string, plural: string, namespace: string | undefined): boolean {
    const [g, p, ns] = this.keyOf(object).split('/');
    return g === group && p === plural && (namespace === undefined || ns === namespace);
  }

  private publish(entry: HistoryEntry): void {
    this.history.push(entry);
    for (const w of this.watchers) {
      if (this.matches(entry.object, w.group, w.plural, w.namespace)) this.send(w.res, { type: entry.type, object: entry.object });
    }
  }

  private send(res: ServerResponse, event: unknown): void {
    res.write(`${JSON.stringify(event)}\n`);
  }

  private status(res: ServerResponse, code: number, reason: string, message = reason): void {
    res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message }));
  }

  /** Recorded PATCH bodies, in order. */
  readonly patches: Array<{ path: string; contentType: string; body: unknown }> = [];
  /** Recorded bodies of the creates that succeeded, in order. */
  readonly created: Array<{ path: string; body: StoredObject }> = [];
  /** Recorded PUT bodies and their answers' status codes, in order. */
  readonly updates: Array<{ path: string; body: StoredObject; status: number }> = [];

  private handleObject(req: IncomingMessage, res: ServerResponse, match: RegExpExecArray): void {
    const [, group = '', , namespace, plural, name, subresource] = match as unknown as [string, string | undefined, string, string | undefined, string, string, string | undefined];
    const key = `${group}/${plural}/${namespace ?? ''}/${name}`;
    if (this.unserved.has(plural)) return this.status(res, 404, 'NotFound');
    const interleaved = req.method === 'PUT' || req.method === 'PATCH' ? this.interleaved.findIndex((i) => (req.url ?? '').endsWith(i.path)) : -1;
    if (interleaved >= 0) this.interleaved.splice(interleaved, 1)[0]!.change();
    const stored = this.objects.get(key);
    if (!stored) return this.status(res, 404, 'NotFound');
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stored));
      return;
    }
    if (req.method !== 'PATCH' && req.method !== 'PUT') return this.status(res, 405, 'MethodNotAllowed');
    const contentType = (req.headers['content-type'] ?? '').split(';')[0]!.trim();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let changed: StoredObject;
      try {
        const body: unknown = JSON.parse(text);
        if (req.method === 'PUT') {
          const update = body as StoredObject;
          const status = this.checkUpdate(stored, update, plural, name);
          this.updates.push({ path: req.url ?? '', body: update, status: status?.code ?? 200 });
          if (status) return this.status(res, status.code, status.reason, status.message);
          changed = update;
        } else {
          if (!PATCH_TYPES.has(contentType)) return this.status(res, 415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: ${[...PATCH_TYPES].join(', ')}`);
          this.patches.push({ path: req.url ?? '', contentType, body });
          changed = contentType === 'application/merge-patch+json' ? (mergePatch(structuredClone(stored), body) as StoredObject) : applyPatch(structuredClone(stored), body as Operation[], true, false).newDocument;
        }
      } catch (e) {
        return this.status(res, 422, 'Invalid', `Invalid: ${(e as Error).message.split('\n')[0]}`);
      }
      const { status: _ignored, ...main } = changed;
      this.put(subresource ? { ...structuredClone(stored), status: changed.status } : { ...main, ...(stored.status !== undefined ? { status: stored.status } : {}) });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(this.objects.get(key)));
    });
  }

  /**
   * POST to a collection, as the real server creates: the body's group/version and namespace must
   * be the path's, and a name already taken is 409 AlreadyExists (so two creators race safely).
   */
  private create(req: IncomingMessage, res: ServerResponse, at: { group: string; version: string; namespace: string | undefined; plural: string }): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let object: StoredObject;
      try {
        object = JSON.parse(Buffer.concat(chunks).toString('utf8')) as StoredObject;
      } catch (e) {
        return this.status(res, 400, 'BadRequest', `invalid JSON: ${(e as Error).message}`);
      }
      const apiVersion = at.group ? `${at.group}/${at.version}` : at.version;
      if (object?.apiVersion !== apiVersion) return this.status(res, 400, 'BadRequest', `the API version in the data (${String(object?.apiVersion)}) does not match the expected API version (${apiVersion})`);
      const name = object.metadata?.name;
      if (!name) return this.status(res, 422, 'Invalid', `${at.plural} is invalid: metadata.name: Required value: name or generateName is required`);
      if ((object.metadata.namespace ?? at.namespace) !== at.namespace) return this.status(res, 400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
      const created: StoredObject = { ...object, metadata: { ...object.metadata, ...(at.namespace ? { namespace: at.namespace } : {}) } };
      if (this.get(created)) return this.status(res, 409, 'AlreadyExists', `${at.plural}${at.group ? `.${at.group}` : ''} "${name}" already exists`);
      this.created.push({ path: req.url ?? '', body: created });
      this.put(created);
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify(this.get(created)));
    });
  }

  /** An update's preconditions as the real server checks them: the resourceVersion it read must still be current. */
  private checkUpdate(stored: StoredObject, update: StoredObject, plural: string, name: string): { code: number; reason: string; message: string } | undefined {
    const rv = update.metadata?.resourceVersion;
    if (!rv) return { code: 422, reason: 'Invalid', message: `${plural} "${name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update` };
    if (rv !== stored.metadata.resourceVersion) {
      return { code: 409, reason: 'Conflict', message: `Operation cannot be fulfilled on ${plural} "${name}": the object has been modified; please apply your changes to the latest version and try again` };
    }
    return undefined;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.url());
    const watch = url.searchParams.get('watch') === 'true';
    const resourceVersion = url.searchParams.get('resourceVersion');
    this.requests.push({ method: req.method ?? 'GET', path: url.pathname, watch, resourceVersion, allowWatchBookmarks: url.searchParams.get('allowWatchBookmarks') });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return this.status(res, 401, 'Unauthorized');
    const failure = this.failures.shift();
    if (failure !== undefined) return this.status(res, failure, 'InjectedFailure');
    const document = req.method === 'GET' ? discovery(url.pathname) : undefined;
    if (document !== undefined) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(document));
      return;
    }
    const match = PATH.exec(url.pathname);
    const single = match ? null : OBJECT_PATH.exec(url.pathname);
    if (single) return this.handleObject(req, res, single);
    if (!match) return this.status(res, 404, 'NotFound');
    const [, matchedGroup, version, namespace, plural] = match as unknown as [string, string | undefined, string, string | undefined, string];
    const group = matchedGroup ?? '';
    if (this.unserved.has(plural)) return this.status(res, 404, 'NotFound');
    if (req.method === 'POST') return this.create(req, res, { group, version, namespace, plural });
    if (!watch) {
      const items = [...this.objects.values()].filter((o) => this.matches(o, group, plural, namespace));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ apiVersion: group ? `${group}/${version}` : version, kind: 'List', metadata: { resourceVersion: String(this.rv) }, items }));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // The real server answers a watch at once, before any event.
    res.flushHeaders();
    const from = Number(resourceVersion ?? '0');
    if (resourceVersion && from < this.compactedBelow) {
      this.send(res, { type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 410, reason: 'Expired', message: `too old resource version: ${from}` } });
      res.end();
      return;
    }
    for (const entry of this.history) {
      if (entry.rv > from && this.matches(entry.object, group, plural, namespace)) this.send(res, { type: entry.type, object: entry.object });
    }
    const watcher: Watcher = { group, plural, namespace, bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true', res };
    this.watchers.add(watcher);
    res.on('close', () => this.watchers.delete(watcher));
  }
}
