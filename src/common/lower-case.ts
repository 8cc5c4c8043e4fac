// Lower-casing of header names on the request path. V8's String#toLowerCase returns a new copy
// even of a string that has no upper-case character, and header names almost always are lower
// case already (HTTP/2 requires it, most HTTP/1.1 clients send them so, configuration is
// lower-cased when compiled): a name is copied only when lower-casing changes it.

/** `s.toLowerCase()`, but `s` itself when that would be equal to it. */
export function lowerCase(s: string): string {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // A-Z, or beyond ASCII (where toLowerCase's full Unicode rules decide).
    if ((c >= 65 && c <= 90) || c > 127) return s.toLowerCase();
  }
  return s;
}
