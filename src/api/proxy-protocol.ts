// A DestinationRule's `proxyProtocol` (its trafficPolicy's and each subset's; the port-level
// settings have none): the version is one of the API's enum values, as the Go mesh's CRD schema
// admits, so the translation never guesses at one.
import { forEachRulePolicy } from './traffic-policies.js';
import { asRecord, type Fields } from './values.js';

const VERSIONS = ['V1', 'V2'];

export function destinationRuleProxyProtocol(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  forEachRulePolicy(spec, path, (policy, at) => {
    const version = asRecord(policy['proxyProtocol'])?.['version'];
    if (version !== undefined && !VERSIONS.includes(version as string)) add(`${at}.proxyProtocol.version`, `${JSON.stringify(version)} is not a PROXY protocol version; expected ${VERSIONS.join(' or ')}`);
  });
}
