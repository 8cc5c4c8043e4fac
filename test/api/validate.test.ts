import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatIssues } from '../../src/api/errors.js';
import { GROUP_OF_KIND, type Kind } from '../../src/api/types.js';
import { MAX_SPEC_BYTES, validateResource } from '../../src/api/validate.js';

function doc(kind: Kind, spec: unknown, metadata: Record<string, unknown> = { name: 'x', namespace: 'ns' }): Record<string, unknown> {
  return { apiVersion: `${GROUP_OF_KIND[kind]}/v1beta1`, kind, metadata, spec };
}

function issuesOf(document: unknown): string[] {
  const result = validateResource(document);
  assert.equal(result.ok, false, 'expected the document to be rejected');
  return result.ok ? [] : result.issues.map((i) => `${i.path}: ${i.message}`);
}

function assertValid(document: unknown): void {
  const result = validateResource(document);
  assert.deepEqual(result.ok ? [] : result.issues, []);
}

/** Asserts that an issue at exactly `path` contains `fragment`. */
function assertIssue(document: unknown, path: string, fragment: string): void {
  const issues = issuesOf(document);
  assert.ok(
    issues.some((line) => line.startsWith(`${path}: `) && line.includes(fragment)),
    `no issue at ${path} containing ${JSON.stringify(fragment)}; got:\n${issues.join('\n')}`,
  );
}

const VALID: [string, Record<string, unknown>][] = [
  ['RequestAuthentication with every jwtRule field', doc('RequestAuthentication', {
    selector: { matchLabels: { app: 'httpbin', 'app.kubernetes.io/name': 'x' } },
    jwtRules: [
      {
        issuer: 'https://issuer.example', audiences: ['a'], jwksUri: 'https://issuer.example/jwks.json',
        fromHeaders: [{ name: 'x-jwt', prefix: 'Bearer ' }], fromParams: ['token'], fromCookies: ['session'],
        outputPayloadToHeader: 'x-payload', outputClaimToHeaders: [{ header: 'x-sub', claim: 'sub' }],
        forwardOriginalToken: true, timeout: '5s',
      },
      { issuer: 'inline', jwks: '{"keys":[]}' },
    ],
  })],
  ['AuthorizationPolicy ALLOW with from/to/when', doc('AuthorizationPolicy', {
    selector: { matchLabels: { app: 'httpbin' } },
    action: 'ALLOW',
    rules: [{
      from: [{ source: { requestPrincipals: ['iss/sub'], notPrincipals: ['a'], namespaces: ['ns'], ipBlocks: ['10.0.0.0/8', '1.2.3.4'], notRemoteIpBlocks: ['2001:db8::/32'] } }],
      to: [{ operation: { methods: ['GET'], paths: ['/x*'], ports: ['8080'], notHosts: ['a.com'] } }],
      when: [
        { key: 'request.auth.claims[groups]', values: ['g1'] },
        { key: 'request.auth.claims[a][b]', notValues: ['v'] },
        { key: 'request.headers[x-user]', values: ['u'] },
        { key: 'source.ip', values: ['10.0.0.1'] },
        { key: 'destination.port', values: ['80'] },
        { key: 'connection.sni', values: ['x.com'] },
      ],
    }],
  })],
  ['AuthorizationPolicy empty spec (allow nothing)', doc('AuthorizationPolicy', {})],
  ['AuthorizationPolicy without spec', { apiVersion: 'security.mesh.io/v1', kind: 'AuthorizationPolicy', metadata: { name: 'deny' } }],
  ['AuthorizationPolicy CUSTOM with provider', doc('AuthorizationPolicy', { action: 'CUSTOM', provider: { name: 'ext' }, rules: [{}] })],
  ['Telemetry', doc('Telemetry', { selector: { matchLabels: { app: 'a' } }, accessLogging: [{ providers: [{ name: 'envoy' }], match: { mode: 'CLIENT' }, disabled: false, filter: { expression: 'response.code >= 400' } }], metrics: [{ providers: [{ name: 'prometheus' }] }] })],
  ['Telemetry metrics with every field', doc('Telemetry', {
    metrics: [
      { providers: [{ name: 'prometheus' }], reportingInterval: '15s', overrides: [
        { match: { metric: 'ALL_METRICS', mode: 'CLIENT' }, disabled: true },
        { match: { metric: 'REQUEST_COUNT', mode: 'SERVER' }, tagOverrides: { user: { value: "request.headers['x-user']" }, request_protocol: { operation: 'REMOVE' } } },
        { match: { customMetric: 'my_metric' }, disabled: false },
        { tagOverrides: { team: { operation: 'UPSERT', value: "'payments'" } } },
      ] },
      { overrides: [{ match: { mode: 'CLIENT_AND_SERVER' } }] },
    ],
  })],
  ['PeerAuthentication', doc('PeerAuthentication', { selector: { matchLabels: { app: 'a' } }, mtls: { mode: 'STRICT' }, portLevelMtls: { '8080': { mode: 'DISABLE' } } })],
  ['ServiceEntry', doc('ServiceEntry', {
    hosts: ['api.example.com'], addresses: ['240.0.0.1'], ports: [{ number: 443, name: 'https', protocol: 'TLS' }],
    location: 'MESH_EXTERNAL', resolution: 'STATIC', endpoints: [{ address: '1.2.3.4', ports: { https: 8443 } }], exportTo: ['.'],
  })],
  ['ServiceEntry with workloadSelector', doc('ServiceEntry', { hosts: ['svc.ns.svc.cluster.local'], ports: [{ number: 80, name: 'http' }], resolution: 'STATIC', workloadSelector: { labels: { app: 'vm' } } })],
  ['WorkloadEntry', doc('WorkloadEntry', { address: '10.0.0.5', ports: { http: 8080 }, labels: { app: 'vm' }, serviceAccount: 'sa', network: 'n1', locality: 'r/z', weight: 10 })],
  ['WorkloadGroup', doc('WorkloadGroup', { metadata: { labels: { app: 'vm' } }, template: { ports: { http: 8080 }, serviceAccount: 'sa' }, probe: { periodSeconds: 5, httpGet: { path: '/ready', port: 8080 } } })],
  ['Sidecar', doc('Sidecar', {
    workloadSelector: { labels: { app: 'a' } },
    ingress: [{ port: { number: 9080, protocol: 'HTTP', name: 'http' }, defaultEndpoint: '127.0.0.1:8080', captureMode: 'NONE' }],
    egress: [{ hosts: ['./*', 'mesh-system/*'] }], outboundTrafficPolicy: { mode: 'REGISTRY_ONLY' },
  })],
  ['DestinationRule', doc('DestinationRule', { host: 'reviews', trafficPolicy: { loadBalancer: { simple: 'ROUND_ROBIN' } }, subsets: [{ name: 'v1', labels: { version: 'v1' } }] })],
  ['DestinationRule with warmup and Maglev', doc('DestinationRule', { host: 'reviews', trafficPolicy: { loadBalancer: { simple: 'LEAST_REQUEST', warmup: { duration: '60s', minimumPercent: 5, aggression: 2 } }, connectionPool: { tcp: { maxConnectionDuration: '1h', tcpKeepalive: { time: '30s', interval: '5s' } } } }, subsets: [{ name: 'v1', trafficPolicy: { loadBalancer: { consistentHash: { httpHeaderName: 'x-user', maglev: { tableSize: 65537 } } } } }] })],
  ['VirtualService with every kind of retryOn entry', doc('VirtualService', { hosts: ['reviews'], http: [{ retries: { attempts: 3, retryOn: 'reset-before-request,refused-stream,envoy-ratelimited,unavailable, 503,429' }, route: [{ destination: { host: 'reviews' } }] }] })],
  ['VirtualService with delegate', doc('VirtualService', { hosts: ['reviews'], http: [{ match: [{ uri: { prefix: '/r' } }], delegate: { name: 'r', namespace: 'ns2' } }, { route: [{ destination: { host: 'reviews' } }] }] })],
  ['DestinationRule with tunnels', doc('DestinationRule', { host: 'db', trafficPolicy: { tunnel: { targetHost: 'db.foo.svc.cluster.local', targetPort: 5432 } }, subsets: [{ name: 'v1', trafficPolicy: { tunnel: { protocol: 'POST', targetHost: '2001:db8::1', targetPort: 65535 } } }] })],
  ['Gateway', doc('Gateway', { selector: { app: 'ingress' }, servers: [{ port: { number: 80, name: 'http', protocol: 'HTTP' }, hosts: ['ns/*.example.com'] }] })],
];

describe('valid resources', () => {
  for (const [name, document] of VALID) it(`accepts ${name}`, () => assertValid(document));

  it('defaults the namespace to default and keeps the typed spec', () => {
    const result = validateResource({ apiVersion: 'networking.mesh.io/v1', kind: 'WorkloadEntry', metadata: { name: 'w' }, spec: { address: '1.1.1.1' } });
    assert.ok(result.ok);
    assert.equal(result.resource.metadata.namespace, 'default');
    assert.equal(result.resource.kind, 'WorkloadEntry');
  });
});

// [case, document, path of the expected issue, fragment of its message]
const INVALID: [string, unknown, string, string][] = [
  // envelope
  ['not an object', 'hello', '', 'expected a resource'],
  ['unknown kind', { apiVersion: 'x/v1', kind: 'Foo', metadata: { name: 'a' } }, 'kind', 'unknown kind "Foo"'],
  ['missing kind', { apiVersion: 'x/v1', metadata: { name: 'a' } }, 'kind', 'required'],
  ['wrong group', { apiVersion: 'networking.mesh.io/v1', kind: 'AuthorizationPolicy', metadata: { name: 'a' }, spec: {} }, 'apiVersion', 'expected one of security.mesh.io/v1beta1, security.mesh.io/v1'],
  ['wrong version', { apiVersion: 'security.mesh.io/v2', kind: 'AuthorizationPolicy', metadata: { name: 'a' }, spec: {} }, 'apiVersion', 'unknown apiVersion'],
  ['missing metadata', { apiVersion: 'security.mesh.io/v1', kind: 'AuthorizationPolicy', spec: {} }, 'metadata', 'required'],
  ['missing name', doc('AuthorizationPolicy', {}, { namespace: 'a' }), 'metadata.name', 'required'],
  ['bad name', doc('AuthorizationPolicy', {}, { name: 'Bad_Name' }), 'metadata.name', 'invalid name'],
  ['bad namespace', doc('AuthorizationPolicy', {}, { name: 'a', namespace: 'a.b' }), 'metadata.namespace', 'invalid namespace'],
  ['bad metadata label', doc('AuthorizationPolicy', {}, { name: 'a', labels: { 'a b': 'x' } }), 'metadata.labels["a b"]', 'invalid label key'],
  ['unknown top-level field', { ...doc('AuthorizationPolicy', {}), extra: 1 }, 'extra', 'unknown field'],
  // RequestAuthentication
  ['issuer missing', doc('RequestAuthentication', { jwtRules: [{ jwksUri: 'https://a/j' }] }), 'spec.jwtRules[0].issuer', 'required field is missing'],
  ['issuer empty', doc('RequestAuthentication', { jwtRules: [{ issuer: '' }] }), 'spec.jwtRules[0].issuer', 'must not be empty'],
  ['jwksUri not http(s)', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', jwksUri: 'ftp://a/j' }] }), 'spec.jwtRules[0].jwksUri', 'expected an http:// or https:// URL'],
  ['jwksUri not a URL', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', jwksUri: 'not a url' }] }), 'spec.jwtRules[0].jwksUri', 'invalid URL'],
  ['jwks and jwksUri both', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', jwksUri: 'https://a/j', jwks: '{"keys":[]}' }] }), 'spec.jwtRules[0].jwks', 'mutually exclusive'],
  ['jwks not a JWKS', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', jwks: 'nope' }] }), 'spec.jwtRules[0].jwks', 'expected a JSON document with a "keys" list'],
  ['unknown jwtRule field', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', jwksURI: 'x' }] }), 'spec.jwtRules[0].jwksURI', 'unknown field "jwksURI"; expected one of issuer, audiences, jwksUri'],
  ['timeout not a duration', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', timeout: '5 seconds' }] }), 'spec.jwtRules[0].timeout', 'invalid duration'],
  ['fromHeaders without name', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', fromHeaders: [{ prefix: 'B ' }] }] }), 'spec.jwtRules[0].fromHeaders[0].name', 'required'],
  ['bad output header', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', outputPayloadToHeader: 'x y' }] }), 'spec.jwtRules[0].outputPayloadToHeader', 'invalid HTTP header name'],
  ['forwardOriginalToken not boolean', doc('RequestAuthentication', { jwtRules: [{ issuer: 'i', forwardOriginalToken: 'yes' }] }), 'spec.jwtRules[0].forwardOriginalToken', 'expected a boolean, got "yes"'],
  ['jwtRules not a list', doc('RequestAuthentication', { jwtRules: { issuer: 'i' } }), 'spec.jwtRules', 'expected an array, got an object'],
  ['selector label value', doc('RequestAuthentication', { selector: { matchLabels: { app: 'bad value!' } } }), 'spec.selector.matchLabels.app', 'invalid label value'],
  ['selector label key', doc('RequestAuthentication', { selector: { matchLabels: { '-app': 'a' } } }), 'spec.selector.matchLabels["-app"]', 'invalid label key'],
  ['selector label not string', doc('RequestAuthentication', { selector: { matchLabels: { app: 1 } } }), 'spec.selector.matchLabels.app', 'expected a string, got 1'],
  // AuthorizationPolicy
  ['unknown action', doc('AuthorizationPolicy', { action: 'PERMIT' }), 'spec.action', 'unknown value "PERMIT"; expected one of ALLOW, DENY, AUDIT, CUSTOM'],
  ['CUSTOM without provider', doc('AuthorizationPolicy', { action: 'CUSTOM' }), 'spec.provider', 'required when action is CUSTOM'],
  ['provider with ALLOW', doc('AuthorizationPolicy', { provider: { name: 'p' } }), 'spec.provider', 'only allowed with action CUSTOM, not ALLOW'],
  ['empty requestPrincipal', doc('AuthorizationPolicy', { rules: [{ from: [{ source: { requestPrincipals: [''] } }] }] }), 'spec.rules[0].from[0].source.requestPrincipals[0]', 'must not be empty'],
  ['empty notRequestPrincipal', doc('AuthorizationPolicy', { rules: [{ from: [{ source: { notRequestPrincipals: [' '] } }] }] }), 'spec.rules[0].from[0].source.notRequestPrincipals[0]', 'must not be empty'],
  ['empty source', doc('AuthorizationPolicy', { rules: [{ from: [{ source: {} }] }] }), 'spec.rules[0].from[0].source', 'at least one field'],
  ['from without source', doc('AuthorizationPolicy', { rules: [{ from: [{}] }] }), 'spec.rules[0].from[0].source', 'required'],
  ['unknown source field', doc('AuthorizationPolicy', { rules: [{ from: [{ source: { user: ['a'] } }] }] }), 'spec.rules[0].from[0].source.user', 'unknown field "user"'],
  ['bad ipBlock', doc('AuthorizationPolicy', { rules: [{ from: [{ source: { ipBlocks: ['10.0.0.300'] } }] }] }), 'spec.rules[0].from[0].source.ipBlocks[0]', 'invalid IP address or CIDR'],
  ['bad CIDR bits', doc('AuthorizationPolicy', { rules: [{ from: [{ source: { notRemoteIpBlocks: ['10.0.0.0/33'] } }] }] }), 'spec.rules[0].from[0].source.notRemoteIpBlocks[0]', 'invalid IP address or CIDR'],
  ['port 0', doc('AuthorizationPolicy', { rules: [{ to: [{ operation: { ports: ['0'] } }] }] }), 'spec.rules[0].to[0].operation.ports[0]', 'expected an integer in 1..65535'],
  ['port 65536', doc('AuthorizationPolicy', { rules: [{ to: [{ operation: { notPorts: ['65536'] } }] }] }), 'spec.rules[0].to[0].operation.notPorts[0]', 'invalid port'],
  ['unknown when key', doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'request.auth.claim[groups]', values: ['a'] }] }] }), 'spec.rules[0].when[0].key', 'unknown key "request.auth.claim[groups]"; expected one of request.auth.claims[<name>], request.headers[<name>]'],
  ['empty claim name', doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'request.auth.claims[]', values: ['a'] }] }] }), 'spec.rules[0].when[0].key', 'unknown key'],
  ['condition without values', doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'request.auth.claims[groups]' }] }] }), 'spec.rules[0].when[0]', 'at least one of values or notValues'],
  ['condition with empty values', doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'source.namespace', values: [] }] }] }), 'spec.rules[0].when[0]', 'at least one of values or notValues'],
  ['condition source.ip value', doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'source.ip', values: ['x'] }] }] }), 'spec.rules[0].when[0].values[0]', 'invalid IP address or CIDR'],
  ['condition destination.port value', doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'destination.port', notValues: ['99999'] }] }] }), 'spec.rules[0].when[0].notValues[0]', 'invalid port'],
  ['condition without key', doc('AuthorizationPolicy', { rules: [{ when: [{ values: ['a'] }] }] }), 'spec.rules[0].when[0].key', 'required'],
  // PeerAuthentication
  ['bad mtls mode', doc('PeerAuthentication', { mtls: { mode: 'ON' } }), 'spec.mtls.mode', 'expected one of UNSET, DISABLE, PERMISSIVE, STRICT'],
  ['portLevelMtls bad port', doc('PeerAuthentication', { selector: { matchLabels: { a: 'b' } }, portLevelMtls: { http: { mode: 'STRICT' } } }), 'spec.portLevelMtls.http', 'invalid port'],
  ['portLevelMtls without selector', doc('PeerAuthentication', { portLevelMtls: { '80': { mode: 'STRICT' } } }), 'spec.portLevelMtls', 'requires a workload selector'],
  // ServiceEntry
  ['ServiceEntry without hosts', doc('ServiceEntry', { ports: [] }), 'spec.hosts', 'required'],
  ['ServiceEntry bad host', doc('ServiceEntry', { hosts: ['a b'] }), 'spec.hosts[0]', 'invalid host'],
  ['ServiceEntry port out of range', doc('ServiceEntry', { hosts: ['a'], ports: [{ number: 0, name: 'p' }] }), 'spec.ports[0].number', 'expected an integer in 1..65535, got 0'],
  ['ServiceEntry port not integer', doc('ServiceEntry', { hosts: ['a'], ports: [{ number: 80.5 }] }), 'spec.ports[0].number', 'expected an integer'],
  ['ServiceEntry duplicate port', doc('ServiceEntry', { hosts: ['a'], ports: [{ number: 80, name: 'a' }, { number: 80, name: 'b' }] }), 'spec.ports[1].number', 'duplicate port number 80'],
  ['ServiceEntry bad address', doc('ServiceEntry', { hosts: ['a'], addresses: ['nope'] }), 'spec.addresses[0]', 'invalid IP'],
  ['ServiceEntry bad resolution', doc('ServiceEntry', { hosts: ['a'], resolution: 'AUTO' }), 'spec.resolution', 'expected one of NONE, STATIC, DNS, DNS_ROUND_ROBIN'],
  ['ServiceEntry bad location', doc('ServiceEntry', { hosts: ['a'], location: 'OUTSIDE' }), 'spec.location', 'expected one of MESH_EXTERNAL, MESH_INTERNAL'],
  ['ServiceEntry STATIC endpoint not IP', doc('ServiceEntry', { hosts: ['a'], resolution: 'STATIC', endpoints: [{ address: 'host.example' }] }), 'spec.endpoints[0].address', 'invalid IP address'],
  ['ServiceEntry endpoint unknown port', doc('ServiceEntry', { hosts: ['a'], ports: [{ number: 80, name: 'http' }], endpoints: [{ address: '1.1.1.1', ports: { grpc: 81 } }] }), 'spec.endpoints[0].ports.grpc', 'no port named "grpc"'],
  ['ServiceEntry selector and endpoints', doc('ServiceEntry', { hosts: ['a'], workloadSelector: { labels: { a: 'b' } }, endpoints: [{ address: '1.1.1.1' }] }), 'spec.workloadSelector', 'cannot be combined with endpoints'],
  ['ServiceEntry DNS wildcard', doc('ServiceEntry', { hosts: ['*.example.com'], resolution: 'DNS' }), 'spec.hosts[0]', 'wildcard host'],
  ['ServiceEntry exportTo', doc('ServiceEntry', { hosts: ['a'], exportTo: ['Bad'] }), 'spec.exportTo[0]', 'invalid exportTo'],
  // WorkloadEntry
  ['WorkloadEntry without address', doc('WorkloadEntry', { labels: { a: 'b' } }), 'spec.address', 'required unless network is set'],
  ['WorkloadEntry bad address', doc('WorkloadEntry', { address: 'a b' }), 'spec.address', 'invalid host'],
  ['WorkloadEntry port range', doc('WorkloadEntry', { address: '1.1.1.1', ports: { http: 70000 } }), 'spec.ports.http', 'expected an integer in 1..65535'],
  ['WorkloadEntry negative weight', doc('WorkloadEntry', { address: '1.1.1.1', weight: -1 }), 'spec.weight', 'expected an integer in 0..4294967295'],
  // WorkloadGroup
  ['WorkloadGroup without template', doc('WorkloadGroup', {}), 'spec.template', 'required'],
  ['WorkloadGroup template address', doc('WorkloadGroup', { template: { address: '1.1.1.1' } }), 'spec.template.address', 'must not be set'],
  ['WorkloadGroup two probes', doc('WorkloadGroup', { template: {}, probe: { httpGet: { port: 80 }, tcpSocket: { port: 80 } } }), 'spec.probe', 'exactly one of httpGet, tcpSocket, exec, grpc'],
  ['WorkloadGroup probe port', doc('WorkloadGroup', { template: {}, probe: { tcpSocket: { port: 0 } } }), 'spec.probe.tcpSocket.port', 'expected an integer in 1..65535'],
  // Sidecar
  ['Sidecar ingress without port', doc('Sidecar', { ingress: [{ defaultEndpoint: '127.0.0.1:80' }] }), 'spec.ingress[0].port', 'required'],
  ['Sidecar bad defaultEndpoint', doc('Sidecar', { ingress: [{ port: { number: 80 }, defaultEndpoint: '10.0.0.1:80' }] }), 'spec.ingress[0].defaultEndpoint', 'invalid defaultEndpoint'],
  ['Sidecar bad captureMode', doc('Sidecar', { ingress: [{ port: { number: 80 }, captureMode: 'TPROXY' }] }), 'spec.ingress[0].captureMode', 'expected one of DEFAULT, IPTABLES, NONE'],
  ['Sidecar duplicate ingress port', doc('Sidecar', { ingress: [{ port: { number: 80 } }, { port: { number: 80 } }] }), 'spec.ingress[1].port.number', 'duplicate ingress port'],
  ['Sidecar egress without hosts', doc('Sidecar', { egress: [{ port: { number: 80 } }] }), 'spec.egress[0].hosts', 'required'],
  ['Sidecar bad egress host', doc('Sidecar', { egress: [{ hosts: ['example.com'] }] }), 'spec.egress[0].hosts[0]', 'expected <namespace>/<dns name>'],
  ['Sidecar bad outbound mode', doc('Sidecar', { outboundTrafficPolicy: { mode: 'OPEN' } }), 'spec.outboundTrafficPolicy.mode', 'expected one of REGISTRY_ONLY, ALLOW_ANY'],
  // DestinationRule, VirtualService, Gateway (structural)
  ['DestinationRule without host', doc('DestinationRule', { subsets: [] }), 'spec.host', 'required'],
  ['DestinationRule duplicate subset', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1' }, { name: 'v1' }] }), 'spec.subsets[1].name', 'duplicate subset name'],
  ['DestinationRule trafficPolicy not object', doc('DestinationRule', { host: 'a', trafficPolicy: 'x' }), 'spec.trafficPolicy', 'expected an object'],
  ['VirtualService delegate with route', doc('VirtualService', { http: [{ delegate: { name: 'd' }, route: [{}] }] }), 'spec.http[0].delegate', 'cannot be combined with route'],
  ['VirtualService bad retry timeout', doc('VirtualService', { http: [{ retries: { attempts: 2, perTryTimeout: 'soon' }, headers: { request: { set: { timeout: 'any text' } } } }] }), 'spec.http[0].retries.perTryTimeout', 'duration'],
  ['DestinationRule bad subset idle timeout', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { connectionPool: { http: { idleTimeout: '5 minutes' } } } }] }), 'spec.subsets[0].trafficPolicy.connectionPool.http.idleTimeout', 'duration'],
  ['VirtualService unknown retryOn condition', doc('VirtualService', { http: [{ retries: { attempts: 2, retryOn: 'connect-failure,reset-on-tuesdays,503' } }] }), 'spec.http[0].retries.retryOn', '"reset-on-tuesdays" is not a valid retryOn policy; expected HTTP status codes or Envoy\'s retry conditions: 5xx, gateway-error, connect-failure'],
  ['VirtualService retryOn codes that are no HTTP status', doc('VirtualService', { http: [{ retries: { attempts: 2, retryOn: '999,0x1f7' } }] }), 'spec.http[0].retries.retryOn', '"999", "0x1f7" are not valid retryOn policies'],
  ['VirtualService negative retry attempts', doc('VirtualService', { http: [{ retries: { attempts: -1 } }] }), 'spec.http[0].retries.attempts', 'cannot be negative'],
  ['VirtualService retries disabled yet configured', doc('VirtualService', { http: [{ retries: { attempts: 0, retryOn: '5xx', perTryTimeout: '1s' } }] }), 'spec.http[0].retries.attempts', 'is 0 (retries disabled) while perTryTimeout, retryOn are set'],
  ['VirtualService direct response status out of range', doc('VirtualService', { http: [{ directResponse: { status: 99 } }] }), 'spec.http[0].directResponse.status', '99 is not in the range 200-599'],
  ['VirtualService exponential delay', doc('VirtualService', { http: [{ fault: { delay: { exponentialDelay: '1s' } } }] }), 'spec.http[0].fault.delay.exponentialDelay', 'exponentialDelay is not supported; use fixedDelay'],
  ['VirtualService HTTP/2 error abort', doc('VirtualService', { http: [{ fault: { abort: { http2Error: 'CANCEL' } } }] }), 'spec.http[0].fault.abort.http2Error', 'HTTP/2 abort fault injection is not supported'],
  ['VirtualService mirrorPercent over 100', doc('VirtualService', { http: [{ mirrorPercent: 150 }] }), 'spec.http[0].mirrorPercent', '150'],
  ['VirtualService unknown http field', doc('VirtualService', { http: [{ routes: [] }] }), 'spec.http[0].routes', 'unknown field'],
  ['Telemetry unknown accessLogging field', doc('Telemetry', { accessLogging: [{ provider: [{ name: 'envoy' }] }] }), 'spec.accessLogging[0].provider', 'unknown field'],
  ['Telemetry unknown mode', doc('Telemetry', { accessLogging: [{ match: { mode: 'INBOUND' } }] }), 'spec.accessLogging[0].match.mode', 'expected one of CLIENT, SERVER, CLIENT_AND_SERVER'],
  ['Telemetry disabled not a boolean', doc('Telemetry', { accessLogging: [{ disabled: 'yes' }] }), 'spec.accessLogging[0].disabled', 'boolean'],
  ['Telemetry unknown metric', doc('Telemetry', { metrics: [{ overrides: [{}, { match: { metric: 'REQUEST_TOTAL' } }] }] }), 'spec.metrics[0].overrides[1].match.metric', 'expected one of ALL_METRICS, REQUEST_COUNT, REQUEST_DURATION'],
  ['Telemetry metric and customMetric', doc('Telemetry', { metrics: [{ overrides: [{ match: { metric: 'REQUEST_COUNT', customMetric: 'x' } }] }] }), 'spec.metrics[0].overrides[0].match', 'only one of metric or customMetric can be set'],
  ['Telemetry empty customMetric', doc('Telemetry', { metrics: [{ overrides: [{ match: { customMetric: '' } }] }] }), 'spec.metrics[0].overrides[0].match.customMetric', 'must not be empty'],
  ['Telemetry unknown metrics mode', doc('Telemetry', { metrics: [{ overrides: [{ match: { mode: 'INBOUND' } }] }] }), 'spec.metrics[0].overrides[0].match.mode', 'expected one of CLIENT, SERVER, CLIENT_AND_SERVER'],
  ['Telemetry UPSERT without value', doc('Telemetry', { metrics: [{ overrides: [{ tagOverrides: { user: { operation: 'UPSERT' } } }] }] }), 'spec.metrics[0].overrides[0].tagOverrides.user.value', 'required when operation is UPSERT'],
  ['Telemetry tag without operation nor value', doc('Telemetry', { metrics: [{ overrides: [{ tagOverrides: { 'x-user': {} } }] }] }), 'spec.metrics[0].overrides[0].tagOverrides["x-user"].value', 'required when operation is UPSERT (the default)'],
  ['Telemetry REMOVE with value', doc('Telemetry', { metrics: [{ overrides: [{ tagOverrides: { user: { operation: 'REMOVE', value: 'a' } } }] }] }), 'spec.metrics[0].overrides[0].tagOverrides.user.value', 'may only be set when operation is UPSERT'],
  ['Telemetry unknown tag operation', doc('Telemetry', { metrics: [{ overrides: [{ tagOverrides: { user: { operation: 'DELETE' } } }] }] }), 'spec.metrics[0].overrides[0].tagOverrides.user.operation', 'expected one of UPSERT, REMOVE'],
  ['Telemetry bad reportingInterval', doc('Telemetry', { metrics: [{ reportingInterval: 'often' }] }), 'spec.metrics[0].reportingInterval', 'expected a duration of at least 1ms'],
  ['Telemetry reportingInterval under 1ms', doc('Telemetry', { metrics: [{}, { reportingInterval: '500us' }] }), 'spec.metrics[1].reportingInterval', 'expected a duration of at least 1ms'],
  ['Telemetry metrics provider without name', doc('Telemetry', { metrics: [{ providers: [{}] }] }), 'spec.metrics[0].providers[0].name', 'required'],
  ['Telemetry unknown metrics field', doc('Telemetry', { metrics: [{ overrides: [{ tags: {} }] }] }), 'spec.metrics[0].overrides[0].tags', 'unknown field'],
  ['Telemetry selector and targetRefs', doc('Telemetry', { selector: { matchLabels: { app: 'a' } }, targetRefs: [{ kind: 'Gateway', name: 'gw' }] }), 'spec.targetRefs', 'only one of targetRefs or selector'],
  ['Gateway server without hosts', doc('Gateway', { servers: [{ port: { number: 80 } }] }), 'spec.servers[0].hosts', 'required'],
  ['Gateway port range', doc('Gateway', { servers: [{ port: { number: 0 }, hosts: ['*'] }] }), 'spec.servers[0].port.number', 'expected an integer in 1..65535'],
  ['Gateway HTTPS server without tls', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'] }] }), 'spec.servers[0].tls', 'required for a HTTPS server'],
  ['Gateway unknown tls mode', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'STRICT' } }] }), 'spec.servers[0].tls.mode', 'expected one of PASSTHROUGH, SIMPLE'],
  ['Gateway SIMPLE without key', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', serverCertificate: '/c.pem' } }] }), 'spec.servers[0].tls.privateKey', 'required with mode SIMPLE unless credentialName is set'],
  ['Gateway MUTUAL without CA', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'MUTUAL', serverCertificate: '/c.pem', privateKey: '/k.pem' } }] }), 'spec.servers[0].tls.caCertificates', 'required with mode MUTUAL'],
  ['Gateway credentialName and credentialNames', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', credentialName: 'a', credentialNames: ['b'] } }] }), 'spec.servers[0].tls', 'only one of credentialName, credentialNames, serverCertificate/privateKey, tlsCertificates may be set (credentialName and credentialNames are)'],
  ['Gateway three credentialNames', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', credentialNames: ['a', 'b', 'c'] } }] }), 'spec.servers[0].tls.credentialNames', 'at most 2 entries'],
  ['Gateway three tlsCertificates', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', tlsCertificates: [1, 2, 3].map((n) => ({ serverCertificate: `/${n}.pem`, privateKey: `/${n}.key` })) } }] }), 'spec.servers[0].tls.tlsCertificates', 'at most 2 entries'],
  ['Gateway tlsCertificates entry without key', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', tlsCertificates: [{ serverCertificate: '/c.pem' }] } }] }), 'spec.servers[0].tls.tlsCertificates[0].privateKey', 'required with mode SIMPLE'],
  ['Gateway caCrl with credentialName', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'MUTUAL', credentialName: 'a', caCrl: '/ca.crl' } }] }), 'spec.servers[0].tls.caCrl', 'not supported with credentialName(s)'],
  ['Gateway caCrl with SIMPLE', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', serverCertificate: '/c.pem', privateKey: '/k.pem', caCrl: '/ca.crl' } }] }), 'spec.servers[0].tls.caCrl', 'not supported with mode SIMPLE'],
  ['Gateway malformed certificate hash', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'MUTUAL', credentialName: 'a', verifyCertificateHash: ['abc'] } }] }), 'spec.servers[0].tls.verifyCertificateHash[0]', 'is not a hex-encoded SHA-256'],
  ['Gateway malformed SPKI pin', doc('Gateway', { servers: [{ port: { number: 443, protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'MUTUAL', credentialName: 'a', verifyCertificateSpki: ['not base64!'] } }] }), 'spec.servers[0].tls.verifyCertificateSpki[0]', 'is not a base64-encoded SHA-256'],
  ['DestinationRule failover and distribute', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { localityLbSetting: { failover: [{ from: 'r1', to: 'r2' }], distribute: [{ from: 'r1/*', to: { 'r1/*': 100 } }] } } } }), 'spec.trafficPolicy.loadBalancer.localityLbSetting', 'distribute and failover cannot both be set'],
  ['DestinationRule failover to its own region', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { loadBalancer: { localityLbSetting: { failover: [{ from: 'r1', to: 'r1' }] } } } }] }), 'spec.subsets[0].trafficPolicy.loadBalancer.localityLbSetting.failover[0]', 'from and to must be different regions'],
  ['DestinationRule failover to a zone', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { localityLbSetting: { failover: [{ from: 'r1', to: 'r2/z1' }] } } } }), 'spec.trafficPolicy.loadBalancer.localityLbSetting.failover[0].to', 'failover names regions only'],
  ['DestinationRule warmup without duration', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { warmup: { minimumPercent: 5 } } } }), 'spec.trafficPolicy.loadBalancer.warmup.duration', 'required'],
  ['DestinationRule warmup minimumPercent over 100', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { warmup: { duration: '300s', minimumPercent: 150 } } } }), 'spec.trafficPolicy.loadBalancer.warmup.minimumPercent', 'must be a percent between 0 and 100, got 150'],
  ['DestinationRule warmup aggression not above 0', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { loadBalancer: { warmup: { duration: '300s', aggression: -0.1 } } } }] }), 'spec.subsets[0].trafficPolicy.loadBalancer.warmup.aggression', 'must be greater than 0, got -0.1'],
  ['DestinationRule bad warmup duration', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { warmupDurationSecs: 'a minute' } } }), 'spec.trafficPolicy.loadBalancer.warmupDurationSecs', 'duration'],
  ['DestinationRule maglev table size not prime', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { consistentHash: { httpHeaderName: 'x-user', maglev: { tableSize: 1000 } } } } }), 'spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize', 'must be a prime number, got 1000'],
  ['DestinationRule maglev table size too big', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { consistentHash: { useSourceIp: true, maglev: { tableSize: 5000011 } } } } }), 'spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize', 'must be less than 5000011'],
  ['DestinationRule maglev without table size', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { consistentHash: { useSourceIp: true, maglev: {} } } } }), 'spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize', 'required for maglev'],
  ['DestinationRule minimumRingSize with maglev', doc('DestinationRule', { host: 'a', trafficPolicy: { loadBalancer: { consistentHash: { useSourceIp: true, minimumRingSize: 1024, maglev: { tableSize: 65537 } } } } }), 'spec.trafficPolicy.loadBalancer.consistentHash.minimumRingSize', 'only one of minimumRingSize or maglev/ringHash'],
  ['DestinationRule bad tcp maxConnectionDuration', doc('DestinationRule', { host: 'a', trafficPolicy: { connectionPool: { tcp: { maxConnectionDuration: 'long' } } } }), 'spec.trafficPolicy.connectionPool.tcp.maxConnectionDuration', 'duration'],
  ['DestinationRule retryBudget percent over 100', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { retryBudget: { percent: 120 } } }] }), 'spec.subsets[0].trafficPolicy.retryBudget.percent', 'must be a percent between 0 and 100, got 120'],
  ['DestinationRule distribute shares', doc('DestinationRule', { host: 'a', trafficPolicy: { portLevelSettings: [{ port: { number: 80 }, loadBalancer: { localityLbSetting: { distribute: [{ from: 'r1/*', to: { 'r1/*': 60, 'r2/*': 30 } }] } } }] } }), 'spec.trafficPolicy.portLevelSettings[0].loadBalancer.localityLbSetting.distribute[0].to', 'the shares must add up to 100, got 90'],
  ['DestinationRule insecureSkipVerify with a CA', doc('DestinationRule', { host: 'a', trafficPolicy: { tls: { mode: 'SIMPLE', insecureSkipVerify: true, caCertificates: '/ca.pem' } } }), 'spec.trafficPolicy.tls.caCertificates', 'cannot be set when insecureSkipVerify is true'],
  ['DestinationRule MUTUAL insecureSkipVerify with SANs', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { portLevelSettings: [{ port: { number: 443 }, tls: { mode: 'MUTUAL', credentialName: 'c', insecureSkipVerify: true, subjectAltNames: ['a'] } }] } }] }), 'spec.subsets[0].trafficPolicy.portLevelSettings[0].tls.subjectAltNames', 'cannot be set when insecureSkipVerify is true'],
  ['DestinationRule proxyProtocol of an unknown version', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { proxyProtocol: { version: 'V3' } } }] }), 'spec.subsets[0].trafficPolicy.proxyProtocol.version', '"V3" is not a PROXY protocol version; expected V1 or V2'],
  ['DestinationRule tunnel of an unknown protocol', doc('DestinationRule', { host: 'a', trafficPolicy: { tunnel: { protocol: 'GET', targetHost: 'a.b', targetPort: 80 } } }), 'spec.trafficPolicy.tunnel.protocol', '"GET" is not a tunnel protocol; expected CONNECT or POST'],
  ['DestinationRule tunnel without targetHost', doc('DestinationRule', { host: 'a', subsets: [{ name: 'v1', trafficPolicy: { tunnel: { targetPort: 80 } } }] }), 'spec.subsets[0].trafficPolicy.tunnel.targetHost', 'required'],
  ['DestinationRule tunnel to a wildcard host', doc('DestinationRule', { host: 'a', trafficPolicy: { tunnel: { targetHost: '*.b', targetPort: 80 } } }), 'spec.trafficPolicy.tunnel.targetHost', 'expected a DNS name or an IP address'],
  ['DestinationRule tunnel without targetPort', doc('DestinationRule', { host: 'a', trafficPolicy: { tunnel: { targetHost: 'a.b' } } }), 'spec.trafficPolicy.tunnel.targetPort', 'required: a port in 1..65535'],
  ['DestinationRule tunnel to port 0', doc('DestinationRule', { host: 'a', trafficPolicy: { tunnel: { targetHost: 'a.b', targetPort: 0 } } }), 'spec.trafficPolicy.tunnel.targetPort', 'must be a port in 1..65535, got 0'],
  ['DestinationRule tunnel to port 65536', doc('DestinationRule', { host: 'a', trafficPolicy: { tunnel: { targetHost: 'a.b', targetPort: 65536 } } }), 'spec.trafficPolicy.tunnel.targetPort', 'must be a port in 1..65535, got 65536'],
  ['DestinationRule tunnel with proxyProtocol', doc('DestinationRule', { host: 'a', trafficPolicy: { tunnel: { targetHost: 'a.b', targetPort: 80 }, proxyProtocol: { version: 'V1' } } }), 'spec.trafficPolicy.tunnel', 'cannot be set together with proxyProtocol'],
  ['DestinationRule credentialName with files', doc('DestinationRule', { host: 'a', trafficPolicy: { tls: { mode: 'MUTUAL', credentialName: 'c', caCrl: '/ca.crl' } } }), 'spec.trafficPolicy.tls.caCrl', 'cannot be set with credentialName'],
];

describe('invalid resources', () => {
  for (const [name, document, path, fragment] of INVALID) it(`rejects ${name}`, () => assertIssue(document, path, fragment));
});

describe('error reporting', () => {
  it('reports every error of a resource, structural and semantic together', () => {
    const issues = issuesOf(doc('AuthorizationPolicy', {
      action: 'CUSTOM',
      bogus: true,
      rules: [{ from: [{ source: { requestPrincipals: [''] } }], when: [{ key: 'a', values: ['b'] }, { key: 'request.auth.claim[groups]' }] }],
    }));
    assert.deepEqual(issues.map((line) => line.split(': ')[0]), [
      'spec.bogus',
      'spec.provider',
      'spec.rules[0].from[0].source.requestPrincipals[0]',
      'spec.rules[0].when[0].key',
      'spec.rules[0].when[1].key',
      'spec.rules[0].when[1]',
    ]);
  });

  it('formats file, document, kind/namespace/name, field path and expectation', () => {
    const result = validateResource(doc('AuthorizationPolicy', { rules: [{ when: [{ key: 'x', values: ['a'] }, { key: 'request.auth.claim[groups]', values: ['a'] }] }] }, { name: 'deny-all', namespace: 'foo' }));
    assert.ok(!result.ok);
    const [, second] = formatIssues({ source: 'samples/bad.yaml', document: 2, resource: result.resource }, result.issues);
    assert.match(second!, /^samples\/bad\.yaml: document 2: AuthorizationPolicy\/foo\/deny-all: spec\.rules\[0\]\.when\[1\]\.key: unknown key "request\.auth\.claim\[groups\]"; expected one of request\.auth\.claims\[<name>\], request\.headers\[<name>\], /);
  });

  it('rejects a spec larger than the limit, naming its size, and accepts one just under it', () => {
    const rule = { from: [{ source: { principals: ['cluster.local/ns/default/sa/client'] } }] };
    const size = (n: number) => JSON.stringify({ rules: Array(n).fill(rule) }).length;
    const under = Math.floor((MAX_SPEC_BYTES - size(1)) / (size(2) - size(1))) + 1;
    assert.ok(size(under) <= MAX_SPEC_BYTES && size(under + 1) > MAX_SPEC_BYTES);
    assertValid(doc('AuthorizationPolicy', { rules: Array(under).fill(rule) }));
    assertIssue(doc('AuthorizationPolicy', { rules: Array(under + 1).fill(rule) }), 'spec', `${size(under + 1)} bytes encoded as JSON; at most ${MAX_SPEC_BYTES}`);
  });
});
