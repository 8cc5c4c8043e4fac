// The connection manager's path normalization, field by field, as Envoy applies it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HttpConnectionManager_PathWithEscapedSlashesAction as Escaped } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { canonicalPath, compilePathNormalization } from '../../src/dataplane/path-normalization.js';

const base = compilePathNormalization({ normalizePath: true, mergeSlashes: false, pathWithEscapedSlashesAction: Escaped.KEEP_UNCHANGED });

test('normalize_path: dot segments, escaped unreserved characters and backslashes, the query kept', () => {
  const cases: [string, string][] = [
    ['/headers', '/headers'],
    ['/./headers', '/headers'],
    ['/anything/../headers', '/headers'],
    ['/%2e/headers', '/headers'],
    ['/%2E%2E/headers', '/headers'],
    ['/anything/./secret/data', '/anything/secret/data'],
    ['/anything/x/../secret/data', '/anything/secret/data'],
    ['/anything/%73ecret/data', '/anything/secret/data'],
    ['/../../etc/passwd', '/etc/passwd'],
    ['/a/b/..', '/a/'],
    ['/a/b/.', '/a/b/'],
    ['/a\\..\\headers', '/headers'],
    ['/a/%2e%2E/b?x=/../y', '/b?x=/../y'],
    ['/a%20b', '/a%20b'],
    ['/a//b', '/a//b'],
    ['/a%2Fb', '/a%2Fb'],
    ['/frag#/../x', '/frag'],
  ];
  for (const [raw, want] of cases) assert.deepEqual(base(raw), { kind: 'continue', path: want }, raw);
});

test('normalize_path: a path with control characters is rejected (400)', () => {
  assert.deepEqual(base('/a\u0001b'), { kind: 'reject', details: 'path_normalization_failed' });
  assert.equal(canonicalPath('/a\u007f'), undefined);
});

test('merge_slashes, and nothing at all when no field is set', () => {
  const merge = compilePathNormalization({ normalizePath: true, mergeSlashes: true, pathWithEscapedSlashesAction: Escaped.KEEP_UNCHANGED });
  assert.deepEqual(merge('//a///b/.//c?q=//'), { kind: 'continue', path: '/a/b/c?q=//' });
  const none = compilePathNormalization({ normalizePath: undefined, mergeSlashes: false, pathWithEscapedSlashesAction: Escaped.IMPLEMENTATION_SPECIFIC_DEFAULT });
  assert.deepEqual(none('/./a//%2e%2e/b'), { kind: 'continue', path: '/./a//%2e%2e/b' });
});

test('path_with_escaped_slashes_action: keep, reject, unescape and forward, unescape and redirect', () => {
  const action = (a: Escaped) => compilePathNormalization({ normalizePath: true, mergeSlashes: true, pathWithEscapedSlashesAction: a });
  assert.deepEqual(action(Escaped.KEEP_UNCHANGED)('/a%2F..%2Fb'), { kind: 'continue', path: '/a%2F..%2Fb' });
  assert.deepEqual(action(Escaped.REJECT_REQUEST)('/a%2fb'), { kind: 'reject', details: 'path_has_escaped_slashes' });
  assert.deepEqual(action(Escaped.REJECT_REQUEST)('/a/b'), { kind: 'continue', path: '/a/b' });
  assert.deepEqual(action(Escaped.UNESCAPE_AND_FORWARD)('/admin%2F..%2Fheaders'), { kind: 'continue', path: '/headers' });
  assert.deepEqual(action(Escaped.UNESCAPE_AND_FORWARD)('/x%5c%2F/y'), { kind: 'continue', path: '/x/y' });
  assert.deepEqual(action(Escaped.UNESCAPE_AND_REDIRECT)('/a%2Fb?q'), { kind: 'redirect', path: '/a/b?q' });
});
