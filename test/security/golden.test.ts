// Golden tests of the policy translation: each testdata/<translator>/<case>.yaml holds the input
// policies, <case>.json the Envoy JSON the builder must produce (and its warnings).
import { test } from 'node:test';
import type { JsonValue } from '@bufbuild/protobuf';
import type { AuthorizationPolicy, RequestAuthentication } from '../../src/api/types.js';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { parseExtensionProviders } from '../../src/model/extension-providers.js';
import { parsePlugins, securityOptions, SECURITY_PLUGINS } from '../../src/security/plugins.js';
import { ExtAuthzSchema } from '../../src/gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import { FilterSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { rbacNetworkFilter } from '../../src/security/filters.js';
import { buildJwtAuthn, type JwksLookup } from '../../src/security/authn/builder.js';
import { goldenCases } from '../helpers/golden.js';
import { jwtJson, rbacJson } from './fixtures.js';

for (const c of goldenCases('test/security/testdata/authz')) {
  test(`authz golden: ${c.name}`, () => {
    const { filters, warnings } = buildRbacFilters(c.documents as AuthorizationPolicy[]);
    c.check({ filters: filters.map((f) => ({ name: f.name, action: f.action, config: rbacJson(f.config) })), warnings });
  });
}

/** The network filters of TCP chains, as the discovery server sends them; CUSTOM with a usable provider on HTTP. */
for (const c of goldenCases('test/security/testdata/authz-tcp')) {
  test(`authz TCP golden: ${c.name}`, () => {
    const providers = parseExtensionProviders([{ name: 'my-authz', envoyExtAuthzGrpc: { service: 'authz.foo.svc.cluster.local', port: 9000 } }]);
    const options = securityOptions(parsePlugins(SECURITY_PLUGINS), providers, () => true);
    const { filters, warnings } = buildRbacFilters(c.documents as AuthorizationPolicy[], options.authorizers, 'tcp');
    c.check({ filters: filters.map((f) => ({ action: f.action, filter: toEnvoyJson(FilterSchema, rbacNetworkFilter(f)) })), warnings });
  });
}

/** A CUSTOM case's first document: `{kind: TestSetup, extensionProviders, services: [ns/host], plugins?}`. */
interface TestSetup {
  extensionProviders: unknown;
  services: string[];
  plugins?: string[];
}

for (const c of goldenCases('test/security/testdata/custom')) {
  test(`custom golden: ${c.name}`, () => {
    const [setup, ...policies] = c.documents as [TestSetup, ...AuthorizationPolicy[]];
    const services = new Set(setup.services);
    const exists = (host: string, ns: string | undefined) => [...services].some((s) => s === `${ns}/${host}` || (ns === undefined && s.endsWith(`/${host}`)));
    const options = securityOptions(parsePlugins(setup.plugins ?? SECURITY_PLUGINS), parseExtensionProviders(setup.extensionProviders), exists);
    const { filters, warnings } = buildRbacFilters(policies, options.authorizers);
    c.check({
      filters: filters.map((f) => ({ name: f.name, action: f.action, config: rbacJson(f.config), ...(f.extAuthz ? { ext_authz: { provider: f.extAuthz.provider, config: toEnvoyJson(ExtAuthzSchema, f.extAuthz.config) } } : {}) })),
      warnings,
    });
  });
}

/** The key set every fetched jwksUri resolves to in these cases. */
const FETCHED_KEYS = '{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"a"}]}';

for (const c of goldenCases('test/security/testdata/authn')) {
  test(`authn golden: ${c.name}`, () => {
    const lookups: JsonValue[] = [];
    const lookup: JwksLookup = (issuer, uri, timeoutMs) => {
      lookups.push([issuer, uri, timeoutMs]);
      return FETCHED_KEYS;
    };
    const warnings: string[] = [];
    const filter = buildJwtAuthn(c.documents as RequestAuthentication[], lookup, warnings);
    c.check({ jwt_authn: filter ? jwtJson(filter) : null, jwks_fetches: lookups, warnings });
  });
}
