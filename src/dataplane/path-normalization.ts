// The connection manager's path normalization (normalize_path, merge_slashes,
// path_with_escaped_slashes_action), applied before route selection and before any HTTP filter, so
// that RBAC, routes and the upstream all see one and the same path, as in Envoy. Pure.
import {
  HttpConnectionManager_PathWithEscapedSlashesAction as EscapedSlashes,
  type HttpConnectionManager,
} from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { queryStart } from '../envoy/request.js';

export type PathDecision =
  | { readonly kind: 'continue'; readonly path: string }
  /** 400: the path cannot be normalized, or it has escaped slashes and the action rejects them. */
  | { readonly kind: 'reject'; readonly details: string }
  /** 307 to the path with its escaped slashes unescaped (UNESCAPE_AND_REDIRECT). */
  | { readonly kind: 'redirect'; readonly path: string };

export type PathNormalizer = (path: string) => PathDecision;

const ESCAPED_SLASH = /%2f|%5c/i;
const ESCAPED_SLASHES = /%2f|%5c/gi;
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;
const CONTROL = /[\u0000-\u001f\u007f]/;

/** Decodes the escapes of unreserved characters (RFC 3986 6.2.2.2); other escapes stay as they are. */
function decodeUnreserved(path: string): string {
  return path.replace(/%([0-9a-fA-F]{2})/g, (escape, hex: string) => {
    const c = String.fromCharCode(parseInt(hex, 16));
    return UNRESERVED.test(c) ? c : escape;
  });
}

/** RFC 3986 5.2.4 on an absolute path: `.` segments dropped, `..` removes its parent (never past the root). */
function removeDotSegments(path: string): string {
  const segments = path.slice(1).split('/');
  const out: string[] = [];
  segments.forEach((s, i) => {
    const last = i === segments.length - 1;
    if (s === '.' || s === '..') {
      if (s === '..') out.pop();
      // A trailing dot segment leaves a directory path: `/a/b/..` is `/a/`.
      if (last) out.push('');
      return;
    }
    out.push(s);
  });
  return `/${out.join('/')}`;
}

/**
 * Envoy's canonical path (its chromium-derived canonicalizer): unreserved characters decoded,
 * backslashes as slashes, dot segments removed. Control characters make it fail.
 */
export function canonicalPath(path: string): string | undefined {
  if (CONTROL.test(path) || !path.startsWith('/')) return undefined;
  // Most paths have nothing to change: no escape to decode, no backslash, no dot segment.
  if (!path.includes('%') && !path.includes('\\') && !path.includes('/.')) return path;
  return removeDotSegments(decodeUnreserved(path).replaceAll('\\', '/'));
}

/** The normalizer an HttpConnectionManager asks for (identity when it asks for none). */
export function compilePathNormalization(hcm: Pick<HttpConnectionManager, 'normalizePath' | 'mergeSlashes' | 'pathWithEscapedSlashesAction'>): PathNormalizer {
  const normalize = hcm.normalizePath ?? false;
  const merge = hcm.mergeSlashes;
  const escaped = hcm.pathWithEscapedSlashesAction;
  const unescapes = escaped !== EscapedSlashes.IMPLEMENTATION_SPECIFIC_DEFAULT && escaped !== EscapedSlashes.KEEP_UNCHANGED;
  return (raw) => {
    // The query is not part of the path; the fragment is never sent upstream (Envoy strips it).
    const q = queryStart(raw);
    let path = q < 0 ? raw : raw.slice(0, q);
    const query = q < 0 || raw[q] === '#' ? '' : raw.slice(q).replace(/#.*$/s, '');
    // `OPTIONS *` and absolute-form targets are not paths to normalize.
    if (!path.startsWith('/')) return { kind: 'continue', path: raw };
    let redirect = false;
    if (unescapes && ESCAPED_SLASH.test(path)) {
      if (escaped === EscapedSlashes.REJECT_REQUEST) return { kind: 'reject', details: 'path_has_escaped_slashes' };
      path = path.replace(ESCAPED_SLASHES, (e) => (e[2] === '5' ? '\\' : '/'));
      redirect = escaped === EscapedSlashes.UNESCAPE_AND_REDIRECT;
    }
    if (normalize) {
      const canonical = canonicalPath(path);
      if (canonical === undefined) return { kind: 'reject', details: 'path_normalization_failed' };
      path = canonical;
    }
    if (merge) path = path.replace(/\/{2,}/g, '/');
    return redirect ? { kind: 'redirect', path: path + query } : { kind: 'continue', path: path + query };
  };
}
