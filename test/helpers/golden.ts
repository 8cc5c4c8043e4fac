// Golden test data: pairs of an input file and the expected output next to it, in testdata/ folders
// of the source tree (read from the repository, not from dist/). `REFRESH_GOLDEN=1` rewrites the
// expected files from what the code produces now; review the diff before committing it.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JsonValue } from '@bufbuild/protobuf';
import { parseDocuments } from '../../src/api/parse.js';
import { REPO_ROOT } from './proc.js';

const REFRESH = process.env['REFRESH_GOLDEN'] === '1';

export interface GoldenCase {
  /** The file name without `.yaml`. */
  readonly name: string;
  /** The documents of the input YAML, as plain values (not validated: builders see what got through). */
  readonly documents: readonly unknown[];
  /** Asserts `actual` equals the expected JSON (or writes it, with REFRESH_GOLDEN=1). */
  check(actual: JsonValue): void;
}

/** Every `<name>.yaml` of a testdata folder (relative to the repository), with its `<name>.json`. */
export function goldenCases(dir: string): GoldenCase[] {
  const abs = join(REPO_ROOT, dir);
  return readdirSync(abs)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => {
      const name = f.slice(0, -'.yaml'.length);
      const expectedFile = join(abs, `${name}.json`);
      const docs = parseDocuments(readFileSync(join(abs, f), 'utf8'));
      const bad = docs.find((d) => d.error !== undefined);
      if (bad) throw new Error(`${dir}/${f}: document ${bad.index}: ${bad.error}`);
      return {
        name,
        documents: docs.map((d) => d.value),
        check(actual: JsonValue): void {
          if (REFRESH) {
            writeFileSync(expectedFile, `${JSON.stringify(actual, null, 2)}\n`);
            return;
          }
          let expected: unknown;
          try {
            expected = JSON.parse(readFileSync(expectedFile, 'utf8'));
          } catch (e) {
            throw new Error(`${dir}/${name}.json: ${(e as Error).message} (REFRESH_GOLDEN=1 writes it)`);
          }
          assert.deepEqual(actual, expected, `${dir}/${name}.json differs from the output (REFRESH_GOLDEN=1 rewrites it)`);
        },
      };
    });
}
