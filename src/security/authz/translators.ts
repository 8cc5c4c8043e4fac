// One small translator per policy attribute: a value of the attribute -> one Envoy RBAC Permission
// (what is accessed: host, method, path, port, destination, SNI) or Principal (who asks: peer
// identity, addresses, token, headers). `from.source`, `to.operation` and `when` fields all name
// an attribute, so a field and the matching `when` key share a translator.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { PermissionSchema, PrincipalSchema, type Permission, type Principal } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import {
  TranslationError,
  cidrRange,
  claimMatcher,
  headerMatcher,
  isPathTemplate,
  pathTemplateMatcher,
  payloadMatcher,
  port,
  requestPrincipalMatchers,
  spiffeNamespaceMatcher,
  spiffePrincipalMatcher,
  stringMatcher,
} from './matchers.js';
import type { Operation, Source } from '../../api/types.js';

/**
 * `httpOnly`: the attribute exists only in an HTTP request (host, method, path, headers, the
 * token's claims), as the Go mesh's generators mark them; a TCP chain's rules cannot test it.
 */
export type Translator =
  | { readonly side: 'permission'; readonly httpOnly: boolean; build(value: string): Permission }
  | { readonly side: 'principal'; readonly httpOnly: boolean; build(value: string): Principal };

export const permission = (rule: MessageInitShape<typeof PermissionSchema>['rule']): Permission => create(PermissionSchema, { rule });
export const principal = (identifier: MessageInitShape<typeof PrincipalSchema>['identifier']): Principal => create(PrincipalSchema, { identifier });

export function andIds(ids: Principal[]): Principal {
  return principal({ case: 'andIds', value: { ids } });
}
export function orIds(ids: Principal[]): Principal {
  return principal({ case: 'orIds', value: { ids } });
}
export function andRules(rules: Permission[]): Permission {
  return permission({ case: 'andRules', value: { rules } });
}
export function orRules(rules: Permission[]): Permission {
  return permission({ case: 'orRules', value: { rules } });
}

const onPermission = (build: (v: string) => Permission, httpOnly = false): Translator => ({ side: 'permission', httpOnly, build });
const onPrincipal = (build: (v: string) => Principal, httpOnly = false): Translator => ({ side: 'principal', httpOnly, build });

const claim = (path: readonly string[]) => onPrincipal((v) => principal({ case: 'metadata', value: claimMatcher(path, v) }), true);

const requestPrincipal = onPrincipal((v) => {
  const { iss, sub } = requestPrincipalMatchers(v);
  return andIds([
    principal({ case: 'metadata', value: payloadMatcher(['iss'], { case: 'stringMatch', value: iss }) }),
    principal({ case: 'metadata', value: payloadMatcher(['sub'], { case: 'stringMatch', value: sub }) }),
  ]);
}, true);

/** `when` keys without a parameter. */
const FIXED: Readonly<Record<string, Translator>> = {
  'source.principal': onPrincipal((v) => principal({ case: 'authenticated', value: { principalName: spiffePrincipalMatcher(v) } })),
  'source.namespace': onPrincipal((v) => principal({ case: 'authenticated', value: { principalName: spiffeNamespaceMatcher(v) } })),
  'source.ip': onPrincipal((v) => principal({ case: 'directRemoteIp', value: cidrRange(v) })),
  'remote.ip': onPrincipal((v) => principal({ case: 'remoteIp', value: cidrRange(v) })),
  'request.auth.principal': requestPrincipal,
  'request.auth.audiences': claim(['aud']),
  'request.auth.presenter': claim(['azp']),
  'destination.ip': onPermission((v) => permission({ case: 'destinationIp', value: cidrRange(v) })),
  'destination.port': onPermission((v) => permission({ case: 'destinationPort', value: port(v) })),
  'connection.sni': onPermission((v) => permission({ case: 'requestedServerName', value: stringMatcher(v) })),
};

// Operation attributes that have no `when` key. Hosts compare case-insensitively, as host names do.
const host = onPermission((v) => permission({ case: 'header', value: headerMatcher(':authority', v, true) }), true);
const method = onPermission((v) => permission({ case: 'header', value: headerMatcher(':method', v) }), true);
// A path with `{*}` or `{**}` is a template (Envoy's uri_template); any other, the value syntax.
const path = onPermission((v) =>
  isPathTemplate(v)
    ? permission({ case: 'uriTemplate', value: pathTemplateMatcher(v) })
    : permission({ case: 'urlPath', value: { rule: { case: 'path', value: stringMatcher(v) } } }),
  true,
);

/** `request.auth.claims[a][b]` -> ['a', 'b']. */
export function bracketPath(key: string, prefix: string): string[] | undefined {
  if (!key.startsWith(prefix)) return undefined;
  const rest = key.slice(prefix.length);
  const m = /^(\[[^[\]]+\])+$/.exec(rest);
  if (!m) return undefined;
  return [...rest.matchAll(/\[([^[\]]+)\]/g)].map((x) => x[1]!);
}

export const WHEN_KEYS: readonly string[] = [...Object.keys(FIXED), 'request.auth.claims[<name>]', 'request.headers[<name>]'];

/** The translator of a `when` key. */
export function translatorFor(key: string): Translator {
  if (Object.hasOwn(FIXED, key)) return FIXED[key]!;
  const claimPath = bracketPath(key, 'request.auth.claims');
  if (claimPath) return claim(claimPath);
  const header = bracketPath(key, 'request.headers');
  if (header && header.length === 1) return onPrincipal((v) => principal({ case: 'header', value: headerMatcher(header[0]!, v) }), true);
  throw new TranslationError(`unknown key "${key}" (expected one of ${WHEN_KEYS.join(', ')})`);
}

/** A field of a source or operation, with its `not` twin, and the attribute it constrains. */
export interface FieldDef<T> {
  readonly field: keyof T & string;
  readonly notField: keyof T & string;
  /** The request attribute: the matching `when` key, or `host`, `method`, `path`. */
  readonly attribute: string;
  readonly translator: Translator;
}

function sourceField(field: keyof Source & string, notField: keyof Source & string, key: string): FieldDef<Source> {
  return { field, notField, attribute: key, translator: FIXED[key]! };
}

export const SOURCE_FIELDS: readonly FieldDef<Source>[] = [
  sourceField('principals', 'notPrincipals', 'source.principal'),
  sourceField('requestPrincipals', 'notRequestPrincipals', 'request.auth.principal'),
  sourceField('namespaces', 'notNamespaces', 'source.namespace'),
  sourceField('ipBlocks', 'notIpBlocks', 'source.ip'),
  sourceField('remoteIpBlocks', 'notRemoteIpBlocks', 'remote.ip'),
];

export const OPERATION_FIELDS: readonly FieldDef<Operation>[] = [
  { field: 'hosts', notField: 'notHosts', attribute: 'host', translator: host },
  { field: 'ports', notField: 'notPorts', attribute: 'destination.port', translator: FIXED['destination.port']! },
  { field: 'methods', notField: 'notMethods', attribute: 'method', translator: method },
  { field: 'paths', notField: 'notPaths', attribute: 'path', translator: path },
];
