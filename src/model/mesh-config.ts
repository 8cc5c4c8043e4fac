// The discovery server's mesh config file (`--meshConfig`): the fields it applies, read purely
// from the file's text. `pathNormalization` and the ext_authz `extensionProviders` are effective;
// the other fields are reported so that the program can say they are not.
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { PATH_NORMALIZATIONS, type PathNormalization } from '../networking/common.js';
import { ExtensionProviderError, parseExtensionProviders, type ExtensionProviders } from './extension-providers.js';

export class MeshConfigError extends Error {}

export interface MeshConfig {
  /** `pathNormalization.normalization`; DEFAULT and an absent field are BASE. */
  readonly pathNormalization: PathNormalization;
  /** `extensionProviders`: the external authorizers of CUSTOM AuthorizationPolicies. */
  readonly extensionProviders: ExtensionProviders;
  /** Top-level fields present in the file that have no effect yet. */
  readonly notEffective: readonly string[];
}

export const DEFAULT_MESH_CONFIG: MeshConfig = { pathNormalization: 'BASE', extensionProviders: { authorizers: new Map(), notEffective: [] }, notEffective: [] };

const EFFECTIVE_FIELDS = ['pathNormalization', 'extensionProviders'];

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
  const notEffective = Object.keys(doc).filter((k) => !EFFECTIVE_FIELDS.includes(k)).sort();
  notEffective.push(...extensionProviders.notEffective.map((p) => `extensionProviders: ${p}`));
  return { pathNormalization, extensionProviders, notEffective };
}
