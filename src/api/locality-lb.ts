// A DestinationRule's `loadBalancer.localityLbSetting`, as the Go mesh validates it: failover and
// distribute exclude each other, a failover names two different regions (no zones), and each
// distribute entry's shares add up to 100. Checked wherever a traffic policy may set it.
import { joinPath } from './errors.js';
import { asRecord, type Fields } from './values.js';
import { forEachTrafficPolicy } from './traffic-policies.js';

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

function localityLb(setting: Fields, path: string, add: (path: string, message: string) => void): void {
  const failover = asArray(setting['failover']);
  const distribute = asArray(setting['distribute']);
  if (failover.length > 0 && distribute.length > 0) add(path, 'distribute and failover cannot both be set');
  failover.forEach((f, i) => {
    const { from, to } = asRecord(f) ?? {};
    const at = joinPath(`${path}.failover`, i);
    for (const [k, v] of [['from', from], ['to', to]] as const) {
      if (typeof v !== 'string' || v === '') add(`${at}.${k}`, 'a region is required');
      else if (v.includes('/')) add(`${at}.${k}`, `failover names regions only, got ${JSON.stringify(v)}`);
    }
    if (typeof from === 'string' && from !== '' && from === to) add(at, `from and to must be different regions, both are ${JSON.stringify(from)}`);
  });
  distribute.forEach((d, i) => {
    const entry = asRecord(d) ?? {};
    const at = joinPath(`${path}.distribute`, i);
    if (typeof entry['from'] !== 'string' || entry['from'] === '') add(`${at}.from`, 'a locality is required');
    const shares = Object.values(asRecord(entry['to']) ?? {});
    if (shares.some((w) => !Number.isInteger(w) || (w as number) < 0)) add(`${at}.to`, 'shares must be whole percents');
    else {
      const total = (shares as number[]).reduce((a, b) => a + b, 0);
      if (total !== 100) add(`${at}.to`, `the shares must add up to 100, got ${total}`);
    }
  });
}

/** The rule's locality settings everywhere they may appear. */
export function destinationRuleLocality(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  forEachTrafficPolicy(spec, path, (policy, at) => {
    const setting = asRecord(asRecord(policy['loadBalancer'])?.['localityLbSetting']);
    if (setting) localityLb(setting, `${at}.loadBalancer.localityLbSetting`, add);
  });
}
