// Structural validation of a spec against its kind's schema (types, required fields, enums,
// ranges, unknown fields) with ajv, translated into field-path messages.

import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { describeValue, joinPath, type Issue } from './errors.js';
import { READINESS_PROBE_SCHEMA, SPEC_SCHEMAS, type Schema } from './schema.js';
import { KINDS, type Kind } from './types.js';

const ajv = new Ajv({ allErrors: true, verbose: true, strict: true });
// Orchestrator vocabulary carried by the schemas for the CRDs; ajv has nothing to check for it.
ajv.addKeyword({ keyword: 'x-kubernetes-preserve-unknown-fields', schemaType: 'boolean' });

const validators = new Map<Kind, ValidateFunction>(KINDS.map((kind) => [kind, ajv.compile(SPEC_SCHEMAS[kind])]));

/** Validates `spec` of a `kind`; paths in the result start at `base` (normally `spec`). */
export function checkStructure(kind: Kind, spec: unknown, base: string): Issue[] {
  const validate = validators.get(kind)!;
  if (validate(spec)) return [];
  return (validate.errors ?? []).map((error) => toIssue(error, base));
}

const probeValidator = ajv.compile(READINESS_PROBE_SCHEMA);

/** Validates a ReadinessProbe found outside a resource (the agent's ProxyConfig.readinessProbe). */
export function checkReadinessProbe(value: unknown, base: string): Issue[] {
  if (probeValidator(value)) return [];
  return (probeValidator.errors ?? []).map((error) => toIssue(error, base));
}

function pointerToPath(base: string, pointer: string): string {
  if (pointer === '') return base;
  return pointer
    .slice(1)
    .split('/')
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce<string>((path, segment) => joinPath(path, /^\d+$/.test(segment) ? Number(segment) : segment), base);
}

function toIssue(error: ErrorObject, base: string): Issue {
  const path = pointerToPath(base, error.instancePath);
  const schema = error.parentSchema as Schema | undefined;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return { path: joinPath(path, String(params['missingProperty'])), message: 'required field is missing' };
    case 'additionalProperties': {
      const field = String(params['additionalProperty']);
      const known = Object.keys(schema?.properties ?? {}).join(', ');
      return { path: joinPath(path, field), message: `unknown field ${JSON.stringify(field)}; expected one of ${known}` };
    }
    case 'type':
      return { path, message: `expected ${article(String(params['type']))}, got ${describeValue(error.data)}` };
    case 'enum':
      return { path, message: `unknown value ${describeValue(error.data)}; expected one of ${(schema?.enum ?? []).join(', ')}` };
    case 'minimum':
    case 'maximum':
      return { path, message: `expected an integer in ${schema?.minimum}..${schema?.maximum}, got ${describeValue(error.data)}` };
    case 'minLength':
      return { path, message: 'must not be empty' };
    case 'minItems':
      return { path, message: `must have at least ${String(params['limit'])} entr${params['limit'] === 1 ? 'y' : 'ies'}` };
    default:
      return { path, message: error.message ?? `fails ${error.keyword}` };
  }
}

function article(type: string): string {
  return type === 'integer' || type === 'object' || type === 'array' ? `an ${type}` : `a ${type}`;
}
