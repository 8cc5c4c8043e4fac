// The attribute expressions mesh-proxy evaluates where the Go mesh's proxies evaluate CEL (the
// stats filter's tag values, Telemetry tagOverrides): a string literal, or one of Envoy's
// attributes (request.host, request.headers['x-user'], upstream_peer.app, node.metadata['NAMESPACE']).
// Anything else (operators, functions, conditionals) is refused with what is wrong, so the
// control plane can say which value has no effect. Shared by the discovery server (validation)
// and mesh-proxy (evaluation); pure.

export type AttributeExpression =
  | { readonly kind: 'literal'; readonly value: string }
  /** `root.field` or `root.map['key']`: `key` only for the map attributes (headers, labels, metadata). */
  | { readonly kind: 'attribute'; readonly root: string; readonly field: string; readonly key?: string };

export class AttributeExpressionError extends Error {}

/** The attributes by root: each field is a string, or (in MAPS) a map read with a key. */
const FIELDS: Readonly<Record<string, readonly string[]>> = {
  request: ['host', 'method', 'path', 'url_path', 'scheme', 'protocol', 'id', 'useragent', 'referer', 'query', 'headers'],
  response: ['code', 'code_details', 'flags', 'grpc_status', 'headers', 'trailers'],
  source: ['address', 'port'],
  destination: ['address', 'port'],
  connection: ['mtls', 'requested_server_name'],
  upstream_peer: ['namespace', 'cluster', 'service', 'revision', 'app', 'version', 'workload', 'name', 'labels'],
  downstream_peer: ['namespace', 'cluster', 'service', 'revision', 'app', 'version', 'workload', 'name', 'labels'],
  node: ['id', 'cluster', 'metadata'],
  xds: ['cluster_name', 'route_name'],
};
const MAPS = new Set(['headers', 'trailers', 'labels', 'metadata']);

/** The steps of `a.b['c']`: identifiers and quoted keys, in order. */
function steps(text: string): string[] {
  const out: string[] = [];
  let i = 0;
  const ident = /^[A-Za-z_][A-Za-z0-9_]*/;
  const quoted = /^\[\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*\]/;
  while (i < text.length) {
    const rest = text.slice(i);
    if (out.length > 0) {
      const q = quoted.exec(rest);
      if (q) {
        out.push(unescape(q[1] ?? q[2] ?? ''));
        i += q[0].length;
        continue;
      }
      if (rest[0] !== '.') throw new AttributeExpressionError(`unexpected ${JSON.stringify(rest[0])} at offset ${i}: only string literals and attributes such as request.headers['x-user'] are evaluated`);
      i += 1;
    }
    const m = ident.exec(text.slice(i));
    if (!m) throw new AttributeExpressionError(`expected a name at offset ${i}: only string literals and attributes such as request.headers['x-user'] are evaluated`);
    out.push(m[0]);
    i += m[0].length;
  }
  return out;
}

const unescape = (s: string): string => s.replace(/\\(.)/g, '$1');

export function parseAttributeExpression(source: string): AttributeExpression {
  const text = source.trim();
  const literal = /^(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")$/.exec(text);
  if (literal) return { kind: 'literal', value: unescape(literal[1] ?? literal[2] ?? '') };
  if (text === '') throw new AttributeExpressionError('empty expression');
  const [root = '', field = '', key, ...more] = steps(text);
  const fields = FIELDS[root];
  if (!fields) throw new AttributeExpressionError(`unknown attribute ${JSON.stringify(root)} (expected one of ${Object.keys(FIELDS).join(', ')})`);
  if (!fields.includes(field)) throw new AttributeExpressionError(`unknown attribute ${root}.${field || '?'} (expected one of ${fields.map((f) => `${root}.${f}`).join(', ')})`);
  if (MAPS.has(field) && key === undefined) throw new AttributeExpressionError(`${root}.${field} is a map: name an entry, e.g. ${root}.${field}['name']`);
  if (!MAPS.has(field) && key !== undefined) throw new AttributeExpressionError(`${root}.${field} is not a map`);
  if (more.length > 0) throw new AttributeExpressionError(`${root}.${field}['${key}'] has no fields`);
  return key === undefined ? { kind: 'attribute', root, field } : { kind: 'attribute', root, field, key: root === 'request' || root === 'response' ? key.toLowerCase() : key };
}

/** What an expression is evaluated against: an attribute's value, undefined where the stream has none. */
export type AttributeSource = (root: string, field: string, key?: string) => string | undefined;

/** The value, or undefined (the stats filter then records `unknown`, as Envoy does on an evaluation error). */
export function evaluateAttribute(e: AttributeExpression, source: AttributeSource): string | undefined {
  return e.kind === 'literal' ? e.value : source(e.root, e.field, e.key);
}
