// Narrowing of untyped parsed values (YAML/JSON documents) before they are known to be valid.

export type Fields = Record<string, unknown>;

/** The value as a plain object (not null, not an array), or undefined. */
export function asRecord(value: unknown): Fields | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Fields) : undefined;
}
