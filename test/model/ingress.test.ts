// Ingress translation, one golden case per file in testdata/ingress/: orchestrator Ingresses and
// IngressClasses, the mesh's own resources (ServiceEntries standing for the registry's services) and
// an optional `kind: MeshConfig` document (`mesh`: mesh config fields, `ingressNamespace`) in; out,
// the Ingresses served, the notices, the generated Gateways and VirtualServices, and the route
// configurations a router proxy labelled `mesh: ingressgateway` in the ingress namespace gets.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { JsonValue } from '@bufbuild/protobuf';
import type { AnyResource } from '../../src/api/types.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import { setScopeLevel } from '../../src/common/log.js';
import { parseMeshConfig } from '../../src/model/mesh-config.js';
import { parseProxy } from '../../src/model/proxy.js';
import type { OrchIngress, OrchIngressClass } from '../../src/model/ingress/class.js';
import { servicePortsOf, translateIngresses } from '../../src/model/ingress/translate.js';
import { gatewayRoutes } from '../../src/xds/generators/gateway.js';
import { goldenCases } from '../helpers/golden.js';
import { pushOf, validated } from '../networking/fixtures.js';

setScopeLevel('model', 'error');

interface CaseInput {
  readonly ingresses: OrchIngress[];
  readonly classes: OrchIngressClass[];
  readonly mesh: AnyResource[];
  readonly meshConfig: Record<string, unknown>;
  readonly ingressNamespace: string;
}

function split(name: string, documents: readonly unknown[]): CaseInput {
  const kindOf = (d: unknown) => (d as { kind?: string }).kind;
  const settings = documents.find((d) => kindOf(d) === 'MeshConfig') as { mesh?: Record<string, unknown>; ingressNamespace?: string } | undefined;
  return {
    ingresses: documents.filter((d) => kindOf(d) === 'Ingress') as OrchIngress[],
    classes: documents.filter((d) => kindOf(d) === 'IngressClass') as OrchIngressClass[],
    mesh: validated(name, documents.filter((d) => !['Ingress', 'IngressClass', 'MeshConfig'].includes(kindOf(d) ?? ''))),
    meshConfig: settings?.mesh ?? {},
    ingressNamespace: settings?.ingressNamespace ?? 'mesh-system',
  };
}

for (const c of goldenCases('test/model/testdata/ingress')) {
  test(`ingress golden: ${c.name}`, () => {
    const input = split(c.name, c.documents);
    const settings = parseMeshConfig(JSON.stringify(input.meshConfig), `${c.name} MeshConfig`).ingress;
    const registry = pushOf(input.mesh);
    const out = translateIngresses({
      ingresses: input.ingresses,
      classes: input.classes,
      settings,
      ingressNamespace: input.ingressNamespace,
      domain: 'cluster.local',
      servicePorts: servicePortsOf(registry.services, 'cluster.local'),
    });
    const push = pushOf([...input.mesh, ...out.gateways, ...out.virtualServices]);
    const proxy = parseProxy(`router~10.0.0.60~gw-1.${input.ingressNamespace}~${input.ingressNamespace}.svc.cluster.local`, { NAMESPACE: input.ingressNamespace, LABELS: { mesh: 'ingressgateway' } });
    const result: JsonValue = {
      served: [...out.served],
      notices: Object.fromEntries([...out.notices].map(([k, v]) => [k, [...v]])),
      gateways: out.gateways as unknown as JsonValue,
      virtualServices: out.virtualServices as unknown as JsonValue,
      routes: gatewayRoutes(proxy, push, undefined, {}).map((r) => toEnvoyJson(RouteConfigurationSchema, r)),
    };
    c.check(result);
  });
}

test('an unknown ingressControllerMode or a non-string ingress field is an error naming the field', () => {
  assert.throws(() => parseMeshConfig('ingressControllerMode: ON', 'mesh'), /mesh: ingressControllerMode: "ON" is not one of OFF, DEFAULT, STRICT/);
  assert.throws(() => parseMeshConfig('ingressClass: [a]', 'mesh'), /mesh: ingressClass: expected a string/);
  const m = parseMeshConfig('ingressControllerMode: DEFAULT\ningressClass: edge\n', 'mesh');
  assert.deepEqual(m.ingress, { mode: 'DEFAULT', ingressClass: 'edge', ingressSelector: '', ingressService: 'mesh-ingressgateway' });
  assert.deepEqual(m.notEffective, []);
  assert.deepEqual(parseMeshConfig('', 'mesh').ingress, { mode: 'STRICT', ingressClass: 'mesh', ingressSelector: '', ingressService: 'mesh-ingressgateway' });
});
