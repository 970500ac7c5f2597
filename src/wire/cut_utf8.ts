/**
 * Cutting text to a number of UTF-8 bytes between two characters (ERROR messages, names echoed
 * in them, client names): shared by the server and the clients.
 *
 * @module
 */

const textEncoder = new TextEncoder();

/** Marks a message that was cut; 3 bytes in UTF-8. */
const CUT_MARK = "\u2026";

/**
 * Returns `text` if it takes at most `maxBytes` UTF-8 bytes, else its longest
 * prefix that fits together with a trailing "…", cut between two characters
 * (never inside one, so the result is valid UTF-8). ERROR messages are cut this
 * way: `docs/protocol.md` promises clients at most 1,024 bytes, and a message
 * quoting a 1,024-byte lock name would be longer. `maxBytes` is at least 3.
 */
export function cutUtf8(text: string, maxBytes: number): string {
  // Each UTF-16 code unit takes at most 3 UTF-8 bytes (a surrogate pair, two units, takes 4).
  if (text.length * 3 <= maxBytes) return text;
  const bytes = textEncoder.encode(text);
  // A lone surrogate is left for the encoder to refuse (encode() would have replaced it).
  if (bytes.length <= maxBytes || !text.isWellFormed()) return text;
  let end = Math.max(0, maxBytes - 3);
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--; // back to the start of a character
  return new TextDecoder().decode(bytes.subarray(0, end)) + CUT_MARK;
}
