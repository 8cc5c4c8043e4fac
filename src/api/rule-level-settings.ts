// A DestinationRule's settings that only its trafficPolicy and each subset's carry (port-level
// settings have none), checked as the Go mesh's schema and Envoy's proto rules admit them, so the
// translation never guesses: `proxyProtocol.version` is one of the API's values, and
// `retryBudget.percent` a percent (Envoy refuses a budget_percent outside 0-100).
import { forEachRulePolicy } from './traffic-policies.js';
import { asRecord, type Fields } from './values.js';

const VERSIONS = ['V1', 'V2'];

type Add = (path: string, message: string) => void;

function proxyProtocol(policy: Fields, at: string, add: Add): void {
  const version = asRecord(policy['proxyProtocol'])?.['version'];
  if (version !== undefined && !VERSIONS.includes(version as string)) add(`${at}.proxyProtocol.version`, `${JSON.stringify(version)} is not a PROXY protocol version; expected ${VERSIONS.join(' or ')}`);
}

function retryBudget(policy: Fields, at: string, add: Add): void {
  const percent = asRecord(policy['retryBudget'])?.['percent'];
  if (percent !== undefined && !(typeof percent === 'number' && percent >= 0 && percent <= 100)) add(`${at}.retryBudget.percent`, `must be a percent between 0 and 100, got ${JSON.stringify(percent)}`);
}

export function destinationRuleLevelSettings(spec: Fields, path: string, add: Add): void {
  forEachRulePolicy(spec, path, (policy, at) => {
    proxyProtocol(policy, at, add);
    retryBudget(policy, at, add);
  });
}
