// Lexical checks shared by the semantic rules: each returns `undefined` when the value is fine,
// else a message saying what is expected.

import { isIP } from 'node:net';
import { parseDuration } from '../common/duration.js';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const HOST_NAME = /^(\*|(\*\.)?[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?)*\.?)$/;
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export function checkName(value: string): string | undefined {
  if (value.length <= 253 && DNS_SUBDOMAIN.test(value)) return undefined;
  return `invalid name ${JSON.stringify(value)}; expected lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (at most 253)`;
}

export function checkNamespace(value: string): string | undefined {
  if (value.length <= 63 && DNS_LABEL.test(value)) return undefined;
  return `invalid namespace ${JSON.stringify(value)}; expected a DNS label (lower-case letters, digits and '-', at most 63)`;
}

/** Orchestrator label key: optional `dns.subdomain/` prefix, then a name of at most 63 characters. */
export function checkLabelKey(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  const prefixOk = prefix === undefined || (prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix));
  if (prefixOk && name.length <= 63 && LABEL_NAME.test(name)) return undefined;
  return `invalid label key ${JSON.stringify(key)}; expected [prefix/]name with name of at most 63 letters, digits, '-', '_', '.' starting and ending alphanumeric`;
}

export function checkLabelValue(value: string): string | undefined {
  if (value === '' || (value.length <= 63 && LABEL_NAME.test(value))) return undefined;
  return `invalid label value ${JSON.stringify(value)}; expected at most 63 letters, digits, '-', '_', '.' starting and ending alphanumeric`;
}

/** An IP address or a CIDR block (`10.0.0.0/8`, `2001:db8::/32`). */
export function checkIpOrCidr(value: string): string | undefined {
  const [address, bits, extra] = value.split('/');
  const family = isIP(address ?? '');
  const max = family === 4 ? 32 : 128;
  const bitsOk = bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= max);
  if (family !== 0 && bitsOk && extra === undefined) return undefined;
  return `invalid IP address or CIDR ${JSON.stringify(value)}; expected e.g. 10.1.2.3 or 10.0.0.0/8`;
}

export function checkIp(value: string): string | undefined {
  return isIP(value) !== 0 ? undefined : `invalid IP address ${JSON.stringify(value)}`;
}

export function checkPortString(value: string): string | undefined {
  const n = Number(value);
  if (/^\d+$/.test(value) && n >= 1 && n <= 65535) return undefined;
  return `invalid port ${JSON.stringify(value)}; expected an integer in 1..65535`;
}

export function checkHost(value: string): string | undefined {
  if (value.length <= 255 && HOST_NAME.test(value)) return undefined;
  return `invalid host ${JSON.stringify(value)}; expected a DNS name, optionally with a leading "*."`;
}

export function checkHeaderName(value: string): string | undefined {
  return HEADER_NAME.test(value) ? undefined : `invalid HTTP header name ${JSON.stringify(value)}`;
}

export function checkHttpUrl(value: string): string | undefined {
  try {
    const url = new URL(value);
    if ((url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '') return undefined;
  } catch {
    // fall through to the message below: an unparsable URL is a user error, not an exception
  }
  return `invalid URL ${JSON.stringify(value)}; expected an http:// or https:// URL`;
}

export function checkDuration(value: string): string | undefined {
  try {
    if (parseDuration(value) > 0n) return undefined;
  } catch {
    // fall through: the message below says what is expected
  }
  return `invalid duration ${JSON.stringify(value)}; expected a positive duration such as 500ms, 5s or 1m`;
}

export function checkJwks(value: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(value);
    if (typeof parsed === 'object' && parsed !== null && Array.isArray((parsed as { keys?: unknown }).keys)) return undefined;
  } catch {
    // fall through: the message explains the expected shape
  }
  return 'invalid inline JWKS; expected a JSON document with a "keys" list';
}

/** exportTo entries: `.` (own namespace), `*` (all) or a namespace name. */
export function checkExportTo(value: string): string | undefined {
  if (value === '.' || value === '*') return undefined;
  return checkNamespace(value) === undefined ? undefined : `invalid exportTo ${JSON.stringify(value)}; expected ".", "*" or a namespace`;
}
