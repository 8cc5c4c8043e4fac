// The x-request-id the connection manager generates: a random (version 4) UUID, as Envoy's.
// crypto.randomUUID builds its text from sixteen two-character pieces (about 0.6 KB of strings
// per call); here the text is written as bytes into a scratch buffer and read as one string.
import { randomFillSync } from 'node:crypto';

const HEX = Buffer.from('0123456789abcdef', 'latin1');
/** Random bytes drawn 128 UUIDs at a time, as randomUUID caches its entropy. */
const ENTROPY = Buffer.alloc(16 * 128);
let used = ENTROPY.length;
const TEXT = Buffer.alloc(36);

/** A new random UUID, in lower-case hex (RFC 9562 version 4). */
export function randomRequestId(): string {
  if (used === ENTROPY.length) {
    randomFillSync(ENTROPY);
    used = 0;
  }
  const at = used;
  used += 16;
  let o = 0;
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) TEXT[o++] = 0x2d;
    let b = ENTROPY[at + i]!;
    // The version (4) and variant (10xx) bits.
    if (i === 6) b = (b & 0x0f) | 0x40;
    else if (i === 8) b = (b & 0x3f) | 0x80;
    TEXT[o++] = HEX[b >> 4]!;
    TEXT[o++] = HEX[b & 0x0f]!;
  }
  return TEXT.toString('latin1', 0, 36);
}
