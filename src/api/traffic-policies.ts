// Every place a DestinationRule carries traffic settings: its trafficPolicy, the port-level
// settings in it, each subset's trafficPolicy and its port-level settings. Checks of a setting
// that may appear in any of them walk them here; those a port cannot have, the rule's and subsets' only.
import { joinPath } from './errors.js';
import { asRecord, type Fields } from './values.js';

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

/** Calls `visit` with each policy object and its path. */
export function forEachTrafficPolicy(spec: Fields, path: string, visit: (policy: Fields, path: string) => void): void {
  forEachRulePolicy(spec, path, (p, at) => {
    visit(p, at);
    asArray(p['portLevelSettings']).forEach((s, i) => {
      const port = asRecord(s);
      if (port) visit(port, joinPath(`${at}.portLevelSettings`, i));
    });
  });
}

/** Calls `visit` with the rule's trafficPolicy and each subset's, not their port-level settings (for settings a port cannot have). */
export function forEachRulePolicy(spec: Fields, path: string, visit: (policy: Fields, path: string) => void): void {
  const policy = (value: unknown, at: string) => {
    const p = asRecord(value);
    if (p) visit(p, at);
  };
  policy(spec['trafficPolicy'], `${path}.trafficPolicy`);
  asArray(spec['subsets']).forEach((s, i) => policy(asRecord(s)?.['trafficPolicy'], `${joinPath(`${path}.subsets`, i)}.trafficPolicy`));
}
