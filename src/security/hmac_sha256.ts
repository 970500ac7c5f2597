/**
 * HMAC-SHA256 (RFC 2104, FIPS 180-4) for short messages with one key, in plain JavaScript on
 * precomputed pads: the key's inner and outer pads are hashed once (their midstates kept), so a
 * MAC costs the message's blocks plus one block, with no allocation. It exists for the cluster's
 * reclaim tickets (`tickets.ts`), minted for every grant and enqueue: `node:crypto`'s
 * `createHmac`, or `createHash().copy()` on precomputed pads, cost 11–23 µs per MAC here (each
 * call crosses into the runtime several times), this about 2 µs. Checked against `node:crypto`
 * by tests/security/tickets_test.ts.
 *
 * @module
 */

// deno-fmt-ignore
const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

// deno-fmt-ignore
const IV = new Int32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);

const BLOCK_BYTES = 64;
/** SHA-256's output, the MAC before truncation. */
const DIGEST_BYTES = 32;

/** The message schedule, shared (JavaScript runs one compression at a time). */
const W = new Int32Array(64);

/** One SHA-256 compression of the 64 bytes of `block` at `offset` into `state`. */
function compress(state: Int32Array, block: Uint8Array, offset: number): void {
  for (let i = 0; i < 16; i++) {
    const j = offset + 4 * i;
    W[i] = (block[j] << 24) | (block[j + 1] << 16) | (block[j + 2] << 8) | block[j + 3];
  }
  for (let i = 16; i < 64; i++) {
    const x = W[i - 15];
    const y = W[i - 2];
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
  }
  let a = state[0], b = state[1], c = state[2], d = state[3];
  let e = state[4], f = state[5], g = state[6], h = state[7];
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  state[0] = (state[0] + a) | 0;
  state[1] = (state[1] + b) | 0;
  state[2] = (state[2] + c) | 0;
  state[3] = (state[3] + d) | 0;
  state[4] = (state[4] + e) | 0;
  state[5] = (state[5] + f) | 0;
  state[6] = (state[6] + g) | 0;
  state[7] = (state[7] + h) | 0;
}

/** An HMAC-SHA256 key with its pads hashed once. */
export class HmacSha256 {
  readonly #inner = IV.slice();
  readonly #outer = IV.slice();
  readonly #state = new Int32Array(8);
  /** The padded message (grown on demand) and the outer hash's one block. */
  #blocks = new Uint8Array(4 * BLOCK_BYTES);
  readonly #outerBlock = new Uint8Array(BLOCK_BYTES);

  /** `key`: at most 64 bytes (a longer key would be hashed first; tickets use 32). */
  constructor(key: Uint8Array) {
    if (key.length > BLOCK_BYTES) throw new RangeError(`HMAC key of ${key.length} bytes`);
    const pad = new Uint8Array(BLOCK_BYTES);
    for (let i = 0; i < BLOCK_BYTES; i++) pad[i] = (key[i] ?? 0) ^ 0x36;
    compress(this.#inner, pad, 0);
    for (let i = 0; i < BLOCK_BYTES; i++) pad[i] = (key[i] ?? 0) ^ 0x5c;
    compress(this.#outer, pad, 0);
    pad.fill(0);
  }

  /**
   * Writes the first `outLength` (≤ 32) bytes of HMAC(key, message[0, length)) into `out` at
   * `outOffset`.
   */
  mac(
    message: Uint8Array,
    length: number,
    out: Uint8Array,
    outOffset = 0,
    outLength = DIGEST_BYTES,
  ): void {
    // Inner: H(ipad ‖ message), the ipad block already in the midstate.
    const blocks = Math.ceil((length + 9) / BLOCK_BYTES);
    const padded = blocks * BLOCK_BYTES;
    if (this.#blocks.length < padded) this.#blocks = new Uint8Array(padded);
    const buf = this.#blocks;
    buf.set(message.subarray(0, length));
    buf.fill(0, length, padded);
    buf[length] = 0x80;
    writeBitLength(buf, padded, BLOCK_BYTES + length);
    const state = this.#state;
    state.set(this.#inner);
    for (let offset = 0; offset < padded; offset += BLOCK_BYTES) compress(state, buf, offset);
    // Outer: H(opad ‖ inner digest), one block.
    const block = this.#outerBlock;
    for (let i = 0; i < 8; i++) writeU32(block, 4 * i, state[i]);
    block.fill(0, DIGEST_BYTES);
    block[DIGEST_BYTES] = 0x80;
    writeBitLength(block, BLOCK_BYTES, BLOCK_BYTES + DIGEST_BYTES);
    state.set(this.#outer);
    compress(state, block, 0);
    for (let i = 0; i < outLength; i++) {
      out[outOffset + i] = state[i >> 2] >>> (24 - 8 * (i & 3));
    }
  }
}

function writeU32(buf: Uint8Array, offset: number, value: number): void {
  buf[offset] = value >>> 24;
  buf[offset + 1] = value >>> 16;
  buf[offset + 2] = value >>> 8;
  buf[offset + 3] = value;
}

/** SHA-256's trailer: the message length in bits, big-endian, in the last 8 bytes. */
function writeBitLength(buf: Uint8Array, end: number, bytes: number): void {
  const bits = bytes * 8;
  writeU32(buf, end - 8, Math.floor(bits / 2 ** 32));
  writeU32(buf, end - 4, bits >>> 0);
}
