// A DestinationRule's `proxyProtocol` (its trafficPolicy's and each subset's; the port-level
// settings have none): the version is one of the API's enum values, as the Go mesh's CRD schema
// admits, so the translation never guesses at one.
import { joinPath } from './errors.js';
import { asRecord, type Fields } from './values.js';

const VERSIONS = ['V1', 'V2'];

export function destinationRuleProxyProtocol(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  const subsets = Array.isArray(spec['subsets']) ? spec['subsets'] : [];
  const policies: [unknown, string][] = [[spec['trafficPolicy'], `${path}.trafficPolicy`], ...subsets.map((s, i): [unknown, string] => [asRecord(s)?.['trafficPolicy'], `${joinPath(`${path}.subsets`, i)}.trafficPolicy`])];
  for (const [policy, at] of policies) {
    const version = asRecord(asRecord(policy)?.['proxyProtocol'])?.['version'];
    if (version !== undefined && !VERSIONS.includes(version as string)) add(`${at}.proxyProtocol.version`, `${JSON.stringify(version)} is not a PROXY protocol version; expected ${VERSIONS.join(' or ')}`);
  }
}
