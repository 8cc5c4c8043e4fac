// Build information for `version`, `/version` and the mesh_build metric. The build writes
// dist/build-info.json; running from sources (tsx) reports a development build.
import { readFileSync } from 'node:fs';
import { stringifyYaml } from './lazy-yaml.js';

export interface BuildInfo {
  version: string;
  revision: string;
  buildDate: string;
  status: string;
  tag: string;
  nodeVersion: string;
  platform: string;
}

function load(): BuildInfo {
  const runtime = { nodeVersion: process.version, platform: `${process.platform}/${process.arch}` };
  try {
    const raw = JSON.parse(readFileSync(new URL('../../build-info.json', import.meta.url), 'utf8')) as Omit<BuildInfo, 'nodeVersion' | 'platform'>;
    return { ...raw, ...runtime };
  } catch {
    return { version: '0.0.0-dev', revision: 'unknown', buildDate: 'unknown', status: 'Modified', tag: 'unknown', ...runtime };
  }
}

export const buildInfo: BuildInfo = load();

/** The full one-line form, in the Go mesh's `version.BuildInfo{...}` shape. */
export function longVersion(info: BuildInfo = buildInfo): string {
  return `version.BuildInfo{Version:"${info.version}", GitRevision:"${info.revision}", BuildDate:"${info.buildDate}", NodeVersion:"${info.nodeVersion}", Platform:"${info.platform}", BuildStatus:"${info.status}", GitTag:"${info.tag}"}`;
}

/** The machine-readable document of `version -o json|yaml`. */
export function versionDocument(info: BuildInfo = buildInfo): { clientVersion: Record<string, string> } {
  return {
    clientVersion: {
      version: info.version,
      revision: info.revision,
      build_date: info.buildDate,
      node_version: info.nodeVersion,
      platform: info.platform,
      status: info.status,
      tag: info.tag,
    },
  };
}

export function formatVersion(output: string, short: boolean): string {
  if (output === 'json') return JSON.stringify(versionDocument(), null, 2) + '\n';
  if (output === 'yaml') return stringifyYaml(versionDocument());
  return (short ? buildInfo.version : longVersion()) + '\n';
}
