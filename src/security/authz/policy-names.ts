// The names of generated RBAC policies, as the production mesh writes them; explanations and the
// ext_authz filter's enabling matcher read them back.

/** Prefix of the names of the CUSTOM rules' RBAC policies; the ext_authz filter keys on it. */
export const EXT_AUTHZ_POLICY_PREFIX = 'mesh-ext-authz';

/** Suffix of a CUSTOM rule turned into a DENY because its provider cannot be used. */
export const BAD_CUSTOM_SUFFIX = '-deny-due-to-bad-CUSTOM-action';

/** The RBAC policy name prefix of one provider's CUSTOM rules. */
export function customPolicyPrefix(provider: string): string {
  return `${EXT_AUTHZ_POLICY_PREFIX}-${provider}`;
}

/** `[<custom prefix>-]ns[<namespace>]-policy[<name>]-rule[<index>]`. */
export function rbacPolicyName(namespace: string, name: string, rule: number, provider?: string): string {
  return `${provider !== undefined ? `${customPolicyPrefix(provider)}-` : ''}ns[${namespace}]-policy[${name}]-rule[${rule}]`;
}

/** The inverse of rbacPolicyName (a bad-CUSTOM suffix included), for explanations. */
export function parseRbacPolicyName(key: string): { namespace: string; name: string; rule: number } | undefined {
  const m = /^(?:mesh-ext-authz-[a-z0-9-]+?-)?ns\[(.*)\]-policy\[(.*)\]-rule\[(\d+)\](?:-deny-due-to-bad-CUSTOM-action)?$/.exec(key);
  return m ? { namespace: m[1]!, name: m[2]!, rule: Number(m[3]) } : undefined;
}
