// Lower-casing of header names on the request path. V8's String#toLowerCase returns a new copy
// even of a string that has no upper-case character, and header names almost always are lower
// case already (HTTP/2 requires it, most HTTP/1.1 clients send them so, configuration is
// lower-cased when compiled): a name is copied only when lower-casing changes it.

/** A-Z, or a character beyond ASCII (where toLowerCase's full Unicode rules decide). */
const MAY_CHANGE = /[A-Z\u0080-\uffff]/;

/** `s.toLowerCase()`, but `s` itself when that would be equal to it. */
export function lowerCase(s: string): string {
  // A regular expression test rather than a loop: as small as a call, so its callers stay small enough to inline.
  return MAY_CHANGE.test(s) ? s.toLowerCase() : s;
}
