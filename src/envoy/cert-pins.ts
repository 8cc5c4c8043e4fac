// Certificate pins as Envoy reads them (verify_certificate_hash, verify_certificate_spki): what
// makes one well formed, shared by mesh-proxy (which NACKs a bad one) and resource validation
// (which refuses a Gateway whose pins Envoy would NACK).

/** A certificate hash pin as lowercase hex, or undefined when it is not 64 hex digits (or, as Envoy, 32 pairs joined by colons). */
export function certificateHashHex(pin: string): string | undefined {
  const hex = pin.length === 95 ? pin.replaceAll(':', '') : pin;
  return /^[0-9a-fA-F]{64}$/.test(hex) ? hex.toLowerCase() : undefined;
}

/** Whether an SPKI pin is a base64-encoded SHA-256 (32 bytes: 43 characters and one `=`). */
export function isSpkiPin(pin: string): boolean {
  return /^[A-Za-z0-9+/]{43}=$/.test(pin);
}

export const HASH_PIN_FORMAT = 'is not a hex-encoded SHA-256 (64 hex digits, or 32 pairs separated by colons)';
export const SPKI_PIN_FORMAT = 'is not a base64-encoded SHA-256 (44 characters)';
