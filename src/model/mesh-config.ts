// The discovery server's mesh config file (`--meshConfig`): the fields it applies, read purely
// from the file's text. `pathNormalization`, the ext_authz `extensionProviders`, `enableAutoMtls`,
// `trustDomainAliases` and the Ingress fields (`ingressControllerMode`, `ingressClass`,
// `ingressSelector`, `ingressService`) are effective; the other fields are reported so that the
// program can say they are not.
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { PATH_NORMALIZATIONS, type PathNormalization } from '../networking/common.js';
import { ExtensionProviderError, parseExtensionProviders, type ExtensionProviders } from './extension-providers.js';
import { DEFAULT_INGRESS_SETTINGS, INGRESS_CONTROLLER_MODES, type IngressControllerMode, type IngressSettings } from './ingress/class.js';

export class MeshConfigError extends Error {}

export interface MeshConfig {
  /** `pathNormalization.normalization`; DEFAULT and an absent field are BASE. */
  readonly pathNormalization: PathNormalization;
  /** `extensionProviders`: the external authorizers of CUSTOM AuthorizationPolicies. */
  readonly extensionProviders: ExtensionProviders;
  /** `enableAutoMtls` (default true): clients use mesh mTLS to endpoints with a sidecar unless a DestinationRule says otherwise. */
  readonly enableAutoMtls: boolean;
  /** `trustDomainAliases`: other trust domains that name the same workloads (SAN checks, AuthorizationPolicy principals). */
  readonly trustDomainAliases: readonly string[];
  /** Which orchestrator Ingresses are translated, and the gateway their Gateways select (model/ingress/). */
  readonly ingress: IngressSettings;
  /** Top-level fields present in the file that have no effect yet. */
  readonly notEffective: readonly string[];
}

export const DEFAULT_MESH_CONFIG: MeshConfig = { pathNormalization: 'BASE', extensionProviders: { authorizers: new Map(), notEffective: [] }, enableAutoMtls: true, trustDomainAliases: [], ingress: DEFAULT_INGRESS_SETTINGS, notEffective: [] };

const EFFECTIVE_FIELDS = new Set(['pathNormalization', 'extensionProviders', 'enableAutoMtls', 'trustDomainAliases', 'ingressControllerMode', 'ingressClass', 'ingressSelector', 'ingressService']);

function readIngressFields(doc: Record<string, unknown>, file: string): IngressSettings {
  const mode = doc['ingressControllerMode'] ?? DEFAULT_INGRESS_SETTINGS.mode;
  if (typeof mode !== 'string' || !(INGRESS_CONTROLLER_MODES as readonly string[]).includes(mode)) {
    throw new MeshConfigError(`${file}: ingressControllerMode: ${JSON.stringify(mode)} is not one of ${INGRESS_CONTROLLER_MODES.join(', ')}`);
  }
  const text = (field: 'ingressClass' | 'ingressSelector' | 'ingressService'): string => {
    const v = doc[field] ?? DEFAULT_INGRESS_SETTINGS[field];
    if (typeof v !== 'string') throw new MeshConfigError(`${file}: ${field}: expected a string, got ${JSON.stringify(v)}`);
    return v;
  };
  return { mode: mode as IngressControllerMode, ingressClass: text('ingressClass'), ingressSelector: text('ingressSelector'), ingressService: text('ingressService') };
}

function readMtlsFields(doc: Record<string, unknown>, file: string): Pick<MeshConfig, 'enableAutoMtls' | 'trustDomainAliases'> {
  const auto = doc['enableAutoMtls'] ?? true;
  if (typeof auto !== 'boolean') throw new MeshConfigError(`${file}: enableAutoMtls: expected true or false, got ${JSON.stringify(auto)}`);
  const aliases = doc['trustDomainAliases'] ?? [];
  if (!Array.isArray(aliases) || aliases.some((a) => typeof a !== 'string' || a === '' || a.includes('/'))) {
    throw new MeshConfigError(`${file}: trustDomainAliases: expected a list of trust domain names (no "/"), got ${JSON.stringify(aliases)}`);
  }
  return { enableAutoMtls: auto, trustDomainAliases: aliases as string[] };
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses the mesh config YAML; errors name the file, the field and what is expected. */
export function parseMeshConfig(text: string, file: string): MeshConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    if (e instanceof YAMLParseError) throw new MeshConfigError(`${file}: not valid YAML: ${e.message}`);
    throw e;
  }
  if (doc === null || doc === undefined) return DEFAULT_MESH_CONFIG;
  if (!isRecord(doc)) throw new MeshConfigError(`${file}: expected a mapping of mesh config fields`);
  const pn = doc['pathNormalization'];
  let pathNormalization: PathNormalization = 'BASE';
  if (pn !== undefined && pn !== null) {
    if (!isRecord(pn)) throw new MeshConfigError(`${file}: pathNormalization: expected a mapping with "normalization"`);
    const mode = pn['normalization'];
    if (mode !== undefined && mode !== 'DEFAULT') {
      if (typeof mode !== 'string' || !(PATH_NORMALIZATIONS as readonly string[]).includes(mode)) {
        throw new MeshConfigError(`${file}: pathNormalization.normalization: ${JSON.stringify(mode)} is not one of DEFAULT, ${PATH_NORMALIZATIONS.join(', ')}`);
      }
      pathNormalization = mode as PathNormalization;
    }
  }
  let extensionProviders: ExtensionProviders;
  try {
    extensionProviders = parseExtensionProviders(doc['extensionProviders']);
  } catch (e) {
    if (e instanceof ExtensionProviderError) throw new MeshConfigError(`${file}: ${e.message}`);
    throw e;
  }
  const notEffective = Object.keys(doc).filter((k) => !EFFECTIVE_FIELDS.has(k)).sort();
  notEffective.push(...extensionProviders.notEffective.map((p) => `extensionProviders: ${p}`));
  return { pathNormalization, extensionProviders, ...readMtlsFields(doc, file), ingress: readIngressFields(doc, file), notEffective };
}
