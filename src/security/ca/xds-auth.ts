// Authentication and authorization of xDS streams (the Go mesh's XDS_AUTH and
// PILOT_ENABLE_XDS_IDENTITY_CHECK): streams on the TLS port must authenticate (their workload
// certificate or a token); plaintext streams only when XDS_AUTH_PLAINTEXT. With the identity
// check on, the namespace (node id and NAMESPACE metadata) and the SERVICE_ACCOUNT a proxy claims
// must be those of one of its identities.
import type { JsonObject } from '@bufbuild/protobuf';
import type { StreamCredentials } from '../../xds/generator.js';
import type { Identity } from '../spiffe.js';
import { AuthenticationError, type CallerAuthenticator } from './authenticate.js';

export interface XdsAuthOptions {
  /** XDS_AUTH. */
  readonly enabled: boolean;
  /** XDS_AUTH_PLAINTEXT. */
  readonly plaintext: boolean;
  /** PILOT_ENABLE_XDS_IDENTITY_CHECK. */
  readonly identityCheck: boolean;
  readonly authenticator: CallerAuthenticator;
}

export interface ProxyClaims {
  readonly id: string;
  readonly metadata: JsonObject;
}

/** The namespaces a proxy claims: the one in its node id (`<type>~<ip>~<pod>.<ns>~<domain>`) and NAMESPACE. */
function claimedNamespaces(p: ProxyClaims): string[] {
  const out = new Set<string>();
  const podPart = p.id.split('~')[2];
  const dot = podPart?.indexOf('.') ?? -1;
  if (podPart && dot >= 0) out.add(podPart.slice(dot + 1));
  if (typeof p.metadata.NAMESPACE === 'string' && p.metadata.NAMESPACE) out.add(p.metadata.NAMESPACE);
  return [...out];
}

/** Why `identities` do not cover what the proxy claims, or undefined when they do. */
export function identityMismatch(p: ProxyClaims, identities: readonly Identity[]): string | undefined {
  const namespaces = claimedNamespaces(p);
  const sa = typeof p.metadata.SERVICE_ACCOUNT === 'string' ? p.metadata.SERVICE_ACCOUNT : '';
  const held = identities.map((i) => `${i.namespace}/${i.serviceAccount}`).join(', ');
  if (namespaces.length === 0) return `proxy ${p.id} names no namespace (node id or NAMESPACE metadata)`;
  for (const ns of namespaces) {
    const inNs = identities.filter((i) => i.namespace === ns);
    if (inNs.length === 0) return `proxy ${p.id} claims namespace ${ns} but its credential is for ${held}`;
    if (sa && !inNs.some((i) => i.serviceAccount === sa)) return `proxy ${p.id} claims service account ${ns}/${sa} but its credential is for ${held}`;
  }
  return undefined;
}

export class XdsAuthorizer {
  constructor(private readonly opts: XdsAuthOptions) {}

  /**
   * Throws the reason a stream is refused: AuthenticationError (unauthenticated) or Error (denied).
   * Resolves true when the proxy's namespace was verified against its credential (what serving it
   * Secrets needs), false when the stream was let in without that check.
   */
  async check(p: ProxyClaims, creds: StreamCredentials | undefined): Promise<boolean> {
    if (!this.opts.enabled) return false;
    if (creds?.transport !== 'tls' && !this.opts.plaintext) return false;
    const caller = await this.opts.authenticator.authenticate(creds ?? {});
    if (!this.opts.identityCheck) return false;
    const why = identityMismatch(p, caller.identities);
    if (why) throw new IdentityMismatchError(why);
    return true;
  }
}

export class IdentityMismatchError extends Error {}
export { AuthenticationError };
