// Renders the CustomResourceDefinitions of every kind from the same schemas the validator uses.
// Structural schemas may not carry `additionalProperties: false` next to `properties`; the
// orchestrator prunes unknown fields instead, and the validation webhook rejects them.

import { stringify } from 'yaml';
import { SPEC_SCHEMAS, type Schema } from './schema.js';
import { API_VERSIONS, GROUP_OF_KIND, KINDS, type Kind } from './types.js';

/** The version the orchestrator stores; the others are served and converted trivially (same shape). */
const STORAGE_VERSION = 'v1';

type OpenApiSchema = Omit<Schema, 'properties' | 'additionalProperties' | 'items'> & {
  properties?: Record<string, OpenApiSchema>;
  additionalProperties?: OpenApiSchema;
  items?: OpenApiSchema;
};

export function toOpenApi(schema: Schema): OpenApiSchema {
  const { properties, additionalProperties, items, ...rest } = schema;
  const out: OpenApiSchema = { ...rest };
  if (properties) out.properties = Object.fromEntries(Object.entries(properties).map(([k, v]) => [k, toOpenApi(v)]));
  if (additionalProperties) out.additionalProperties = toOpenApi(additionalProperties);
  if (items) out.items = toOpenApi(items);
  return out;
}

export function pluralOf(kind: Kind): string {
  const lower = kind.toLowerCase();
  return /[^aeiou]y$/.test(lower) ? `${lower.slice(0, -1)}ies` : `${lower}s`;
}

export function crdOf(kind: Kind): Record<string, unknown> {
  const group = GROUP_OF_KIND[kind];
  const plural = pluralOf(kind);
  const schema = {
    openAPIV3Schema: {
      type: 'object',
      properties: {
        spec: toOpenApi(SPEC_SCHEMAS[kind]),
        status: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
      },
    },
  };
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}`, labels: { 'app.kubernetes.io/part-of': 'mesh' } },
    spec: {
      group,
      names: { kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase(), categories: ['mesh-io'] },
      scope: 'Namespaced',
      // The status subresource, as the Go mesh's CRDs: status is written only through `/status`
      // (the discovery server's status writer) and a status write leaves `generation` alone.
      versions: API_VERSIONS.map((name) => ({ name, served: true, storage: name === STORAGE_VERSION, schema, subresources: { status: {} } })),
    },
  };
}

/** The whole deploy/crds.yaml text. */
export function renderCrds(): string {
  const header = '# Generated from src/api/schema.ts by `npx tsx src/api/write-crds.ts`. Do not edit by hand.\n';
  return header + KINDS.map((kind) => stringify(crdOf(kind), { aliasDuplicateObjects: false, lineWidth: 0 })).join('---\n');
}
