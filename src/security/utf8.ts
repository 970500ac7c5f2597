/**
 * Strict UTF-8 checking for files whose meaning would change if bad bytes
 * became U+FFFD (the ACL file).
 *
 * @module
 */

/**
 * Offset of the first byte of the first ill-formed sequence in `bytes`, or -1
 * when all of it is well-formed UTF-8. Follows the decoder of the WHATWG
 * Encoding Standard (what `new TextDecoder("utf-8", { fatal: true })`
 * refuses): no overlong forms, no encoded surrogates, nothing above
 * U+10FFFF, no sequence cut short.
 */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length;) {
    const lead = bytes[i];
    if (lead < 0x80) {
      i++;
      continue;
    }
    let continuation: number;
    let lower = 0x80;
    let upper = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      continuation = 1;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      continuation = 2;
      if (lead === 0xe0) lower = 0xa0; // overlong
      if (lead === 0xed) upper = 0x9f; // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      continuation = 3;
      if (lead === 0xf0) lower = 0x90; // overlong
      if (lead === 0xf4) upper = 0x8f; // above U+10FFFF
    } else {
      return i;
    }
    for (let k = 1; k <= continuation; k++) {
      const byte = bytes[i + k];
      if (byte === undefined || byte < lower || byte > upper) return i;
      lower = 0x80;
      upper = 0xbf;
    }
    i += continuation + 1;
  }
  return -1;
}
