/**
 * A small, strict DER reader: just enough of ASN.1 to walk an X.509
 * certificate to its subject and its extensions. Every length is checked
 * against its enclosing element, so a malformed certificate is an error,
 * never a read past the end or a guess.
 *
 * Only what X.509 uses is accepted: single-byte tags (tag numbers up to 30)
 * and definite lengths in the shortest form (DER), up to 2^24 - 1 bytes.
 *
 * @module
 */

/** A certificate (or part of one) that is not valid DER. */
export class DerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DerError";
  }
}

/** One element: its tag byte and where its contents lie in the buffer. */
export interface DerElement {
  /** The whole identifier octet: class, constructed bit and tag number. */
  readonly tag: number;
  /** The buffer the element was read from. */
  readonly bytes: Uint8Array;
  /** Offset of the first content byte. */
  readonly start: number;
  /** Offset after the last content byte. */
  readonly end: number;
}

/** Universal and context tags this module's callers look for. */
export const DER_TAGS = {
  BOOLEAN: 0x01,
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  OID: 0x06,
  UTF8_STRING: 0x0c,
  PRINTABLE_STRING: 0x13,
  TELETEX_STRING: 0x14,
  IA5_STRING: 0x16,
  UNIVERSAL_STRING: 0x1c,
  BMP_STRING: 0x1e,
  SEQUENCE: 0x30,
  SET: 0x31,
} as const;

/** Reads the element that starts at `offset` and must end by `limit`. */
function readElement(bytes: Uint8Array, offset: number, limit: number): DerElement {
  if (offset + 2 > limit) throw new DerError(`truncated element at byte ${offset}`);
  const tag = bytes[offset];
  if ((tag & 0x1f) === 0x1f) throw new DerError(`multi-byte tag at byte ${offset}`);
  let length = bytes[offset + 1];
  let start = offset + 2;
  if (length & 0x80) {
    const count = length & 0x7f;
    if (count === 0) throw new DerError(`indefinite length at byte ${offset}`);
    if (count > 3) throw new DerError(`length of more than 3 bytes at byte ${offset}`);
    if (start + count > limit) throw new DerError(`truncated length at byte ${offset}`);
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + bytes[start + i];
    // DER: the long form only for lengths of 128 and more, without leading zero bytes.
    if (length < 0x80 || bytes[start] === 0) {
      throw new DerError(`length not in its shortest form at byte ${offset}`);
    }
    start += count;
  }
  const end = start + length;
  if (end > limit) throw new DerError(`element at byte ${offset} runs past its container`);
  return { tag, bytes, start, end };
}

/** The elements directly inside a constructed element (a SEQUENCE, a SET, an explicit tag). */
export function children(parent: DerElement): DerElement[] {
  if ((parent.tag & 0x20) === 0) {
    throw new DerError(`element with tag 0x${hex(parent.tag)} is not constructed`);
  }
  const out: DerElement[] = [];
  for (let offset = parent.start; offset < parent.end;) {
    const child = readElement(parent.bytes, offset, parent.end);
    out.push(child);
    offset = child.end;
  }
  return out;
}

/** Reads a buffer that must hold exactly one element (no trailing bytes). */
export function readWhole(bytes: Uint8Array): DerElement {
  const element = readElement(bytes, 0, bytes.length);
  if (element.end !== bytes.length) {
    throw new DerError(`${bytes.length - element.end} bytes after the outermost element`);
  }
  return element;
}

/** Throws unless `element` has tag `tag`; `what` names it in the message. */
export function expectTag(element: DerElement | undefined, tag: number, what: string): DerElement {
  if (element === undefined) throw new DerError(`${what} is missing`);
  if (element.tag !== tag) {
    throw new DerError(`${what} has tag 0x${hex(element.tag)}, expected 0x${hex(tag)}`);
  }
  return element;
}

/** The content bytes of an element. */
export function contents(element: DerElement): Uint8Array {
  return element.bytes.subarray(element.start, element.end);
}

/** Whether the element's contents equal `expected` (e.g. an encoded OID). */
export function contentsEqual(element: DerElement, expected: Uint8Array): boolean {
  if (element.end - element.start !== expected.length) return false;
  for (let i = 0; i < expected.length; i++) {
    if (element.bytes[element.start + i] !== expected[i]) return false;
  }
  return true;
}

function hex(byte: number): string {
  return byte.toString(16).padStart(2, "0");
}
