// One AuthorizationPolicy rule -> one Envoy RBAC Policy.
// A request matches a rule when it matches one `from` entry AND one `to` entry AND every `when`.
// Envoy ORs a Policy's principals and ORs its permissions, and needs both to match, so: one
// Principal per `from` entry and one Permission per `to` entry, each the AND of that entry's
// fields plus the rule's `when` conditions of the same side. Inside a field the values are ORed;
// a `not*` field is a NOT of the OR of its values.
import { create } from '@bufbuild/protobuf';
import { PolicySchema, type Permission, type Policy, type Principal } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import type { Rule } from '../../api/types.js';
import { TranslationError } from './matchers.js';
import {
  OPERATION_FIELDS,
  SOURCE_FIELDS,
  andIds,
  andRules,
  orIds,
  orRules,
  permission,
  principal,
  translatorFor,
  type FieldDef,
  type Translator,
} from './translators.js';

/** One constrained attribute of a rule: its values and not-values, and where it was written. */
interface Clause extends ClauseInfo {
  readonly translator: Translator;
}

/**
 * Where one AND-element of a generated Principal or Permission came from, so an explanation can
 * name the `from`/`to` entry and field, or the `when` condition, that a request did not satisfy.
 */
export interface ClauseInfo {
  /** As the policy spells it: `from[0].source.requestPrincipals`, `when[1] (request.auth.claims[groups])`. */
  readonly where: string;
  /** The request attribute it constrains: a `when` key, or `host`, `method`, `path` for operations. */
  readonly attribute: string;
  readonly values: readonly string[];
  readonly notValues: readonly string[];
}

/**
 * The shape of a generated Policy: `principals[j]` is from[j] (or the rule's `when` alone), and is
 * `and_ids` of exactly the clauses listed, in order (an empty list: `any`); the same for
 * `permissions[i]` and to[i].
 */
export interface PolicyLayout {
  readonly principals: readonly (readonly ClauseInfo[])[];
  readonly permissions: readonly (readonly ClauseInfo[])[];
}

/**
 * How a rule with an untranslatable value is handled. `drop-rule` (ALLOW, AUDIT): the rule is
 * left out, so it allows nothing. `drop-clause` (DENY, CUSTOM): only the bad field is left out,
 * which makes the rule match more requests, so it denies more. Either way the error fails closed.
 */
export type OnError = 'drop-rule' | 'drop-clause';

export interface RuleResult {
  policy?: Policy;
  layout?: PolicyLayout;
  warnings: string[];
}

function clauses<T extends object>(defs: readonly FieldDef<T>[], entry: T | undefined, where: string): Clause[] {
  if (!entry) return [];
  const out: Clause[] = [];
  for (const d of defs) {
    const values = (entry[d.field] as string[] | undefined) ?? [];
    const notValues = (entry[d.notField] as string[] | undefined) ?? [];
    if (values.length > 0 || notValues.length > 0) out.push({ where: `${where}.${d.field}`, attribute: d.attribute, translator: d.translator, values, notValues });
  }
  return out;
}

/** AND of [OR of the values, NOT OR of the not-values], on the clause's side. */
function translateClause(c: Clause): Permission | Principal {
  const t = c.translator;
  if (c.values.length === 0 && c.notValues.length === 0) throw new TranslationError('no values or notValues (expected at least one)');
  if (t.side === 'permission') {
    const parts: Permission[] = [];
    if (c.values.length) parts.push(orRules(c.values.map((v) => t.build(v))));
    if (c.notValues.length) parts.push(permission({ case: 'notRule', value: orRules(c.notValues.map((v) => t.build(v))) }));
    return andRules(parts);
  }
  const parts: Principal[] = [];
  if (c.values.length) parts.push(orIds(c.values.map((v) => t.build(v))));
  if (c.notValues.length) parts.push(principal({ case: 'notId', value: orIds(c.notValues.map((v) => t.build(v))) }));
  return andIds(parts);
}

/**
 * Translates one rule. `httpOnly` set: for a TCP chain (the network rbac filter), where the HTTP-only
 * attributes (host, method, path, request headers, request principals and claims) cannot be tested,
 * as the Go mesh does: `drop-rule` (ALLOW) leaves out a rule that uses one, so it allows nothing on
 * TCP; `drop-clause` (DENY, AUDIT, CUSTOM) leaves out only those fields, so the rule matches more.
 */
export function translateRule(rule: Rule, onError: OnError, httpOnly?: OnError): RuleResult {
  const warnings: string[] = [];
  const permissionsOf: Permission[][] = [];
  const principalsOf: Principal[][] = [];
  const permissionLayout: ClauseInfo[][] = [];
  const principalLayout: ClauseInfo[][] = [];

  /** Translates the clauses into perms/princs, recording each translated clause in permInfo/princInfo. */
  const translate = (list: Clause[], perms: Permission[], princs: Principal[], permInfo: ClauseInfo[], princInfo: ClauseInfo[]): boolean => {
    for (const c of list) {
      if (httpOnly && c.translator.httpOnly) {
        if (httpOnly === 'drop-rule') return false;
        continue;
      }
      let out: Permission | Principal;
      try {
        out = translateClause(c);
      } catch (e) {
        if (!(e instanceof TranslationError)) throw e;
        warnings.push(`${c.where}: ${e.message}; ${onError === 'drop-rule' ? 'rule ignored' : 'field ignored, the rule matches more requests'}`);
        if (onError === 'drop-rule') return false;
        continue;
      }
      const info: ClauseInfo = { where: c.where, attribute: c.attribute, values: c.values, notValues: c.notValues };
      if (c.translator.side === 'permission') {
        perms.push(out as Permission);
        permInfo.push(info);
      } else {
        princs.push(out as Principal);
        princInfo.push(info);
      }
    }
    return true;
  };

  const when: Clause[] = [];
  for (const [i, cond] of (rule.when ?? []).entries()) {
    const where = `when[${i}] (${cond.key})`;
    try {
      when.push({ where, attribute: cond.key, translator: translatorFor(cond.key), values: cond.values ?? [], notValues: cond.notValues ?? [] });
    } catch (e) {
      if (!(e instanceof TranslationError)) throw e;
      warnings.push(`${where}: ${e.message}; ${onError === 'drop-rule' ? 'rule ignored' : 'condition ignored, the rule matches more requests'}`);
      if (onError === 'drop-rule') return { warnings };
    }
  }
  const whenPerms: Permission[] = [];
  const whenPrincs: Principal[] = [];
  const whenPermInfo: ClauseInfo[] = [];
  const whenPrincInfo: ClauseInfo[] = [];
  if (!translate(when, whenPerms, whenPrincs, whenPermInfo, whenPrincInfo)) return { warnings };

  const from = rule.from?.length ? rule.from.map((f, i) => clauses(SOURCE_FIELDS, f.source, `from[${i}].source`)) : [[]];
  for (const list of from) {
    const princs: Principal[] = [];
    const info: ClauseInfo[] = [];
    if (!translate(list, [], princs, [], info)) return { warnings };
    principalsOf.push([...princs, ...whenPrincs]);
    principalLayout.push([...info, ...whenPrincInfo]);
  }
  const to = rule.to?.length ? rule.to.map((t, i) => clauses(OPERATION_FIELDS, t.operation, `to[${i}].operation`)) : [[]];
  for (const list of to) {
    const perms: Permission[] = [];
    const info: ClauseInfo[] = [];
    if (!translate(list, perms, [], info, [])) return { warnings };
    permissionsOf.push([...perms, ...whenPerms]);
    permissionLayout.push([...info, ...whenPermInfo]);
  }

  const policy = create(PolicySchema, {
    permissions: permissionsOf.map((and) => (and.length ? andRules(and) : permission({ case: 'any', value: true }))),
    principals: principalsOf.map((and) => (and.length ? andIds(and) : principal({ case: 'any', value: true }))),
  });
  return { policy, layout: { principals: principalLayout, permissions: permissionLayout }, warnings };
}
