// Digests through WebCrypto, as lowercase hex.

/** Lowercase hex of bytes. */
export function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Lowercase hex digest of `bytes` under a WebCrypto algorithm name (SHA-1, SHA-256, SHA-384, SHA-512). */
export async function sha(algorithm, bytes) {
  return hex(await crypto.subtle.digest(algorithm, bytes));
}

export const sha256 = (bytes) => sha('SHA-256', bytes);

// SHA-256 (FIPS 180-4) of short inputs, synchronously: the split keys are 100,000 digests of a few
// bytes each, where one WebCrypto call per key costs more in promises than in hashing. Every file's
// digest still goes through WebCrypto; tests/web compares this one with Python's on every bundle.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const W = new Int32Array(64);
const SHORT = new Uint8Array(128);
const SHORT_STATE = new Int32Array(8);

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** One SHA-256 block: `h` (Int32Array(8)) updated by the 16 big-endian words already in W[0..15]. */
function compress(h) {
  for (let t = 16; t < 64; t++) {
    const x = W[t - 15];
    const y = W[t - 2];
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
  }
  let a = h[0]; let c1 = h[1]; let c2 = h[2]; let d = h[3]; let e = h[4]; let f = h[5]; let g = h[6]; let hh = h[7];
  for (let t = 0; t < 64; t++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (hh + S1 + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & c1) ^ (a & c2) ^ (c1 & c2))) | 0;
    hh = g; g = f; f = e; e = (d + t1) | 0; d = c2; c2 = c1; c1 = a; a = (t1 + t2) | 0;
  }
  h[0] = (h[0] + a) | 0; h[1] = (h[1] + c1) | 0; h[2] = (h[2] + c2) | 0; h[3] = (h[3] + d) | 0;
  h[4] = (h[4] + e) | 0; h[5] = (h[5] + f) | 0; h[6] = (h[6] + g) | 0; h[7] = (h[7] + hh) | 0;
}

const INITIAL = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

function hexOf(h) {
  let out = '';
  for (const x of h) out += HEX[(x >>> 24) & 255] + HEX[(x >>> 16) & 255] + HEX[(x >>> 8) & 255] + HEX[x & 255];
  return out;
}

const bswap = (v) => ((v & 0xff) << 24) | ((v & 0xff00) << 8) | ((v >>> 8) & 0xff00) | (v >>> 24);

/**
 * SHA-256 of a stream of non-negative integers (below 2**53), each as 8 little-endian bytes (int64),
 * fed a row at a time, in bounded memory: the bootstrap's indices_sha256 over its resample matrix,
 * which may be hundreds of megabytes and is never held whole. WebCrypto's digest is one call over
 * one buffer, so it cannot do this.
 */
export class Int64Sha256 {
  constructor() {
    this.h = Int32Array.from(INITIAL);
    this.block = new Int32Array(16); // words of the block being filled (always an even count)
    this.used = 0;
    this.count = 0; // integers hashed
  }

  /** Feed every value of `row` (a Uint32Array, or a Float64Array of integers below 2**53). The
   * words go straight into the shared schedule W; a partial block is kept aside between calls (the
   * page's other SHA-256 uses W too). */
  update(row) {
    const h = this.h;
    let used = this.used;
    for (let t = 0; t < used; t++) W[t] = this.block[t];
    const len = row.length;
    if (row instanceof Uint32Array) {
      for (let i = 0; i < len; i++) {
        const v = row[i];
        W[used] = ((v & 0xff) << 24) | ((v & 0xff00) << 8) | ((v >>> 8) & 0xff00) | (v >>> 24);
        W[used + 1] = 0;
        used += 2;
        if (used === 16) {
          compress(h);
          used = 0;
        }
      }
    } else {
      for (let i = 0; i < len; i++) {
        const v = row[i];
        W[used] = bswap(v % 0x100000000);
        W[used + 1] = bswap(Math.floor(v / 0x100000000));
        used += 2;
        if (used === 16) {
          compress(h);
          used = 0;
        }
      }
    }
    for (let t = 0; t < used; t++) this.block[t] = W[t];
    this.used = used;
    this.count += len;
  }

  /** The lowercase hex digest of everything fed (the hasher is spent). */
  hex() {
    const bits = this.count * 64; // 8 bytes each
    const tail = new Int32Array(32);
    tail.set(this.block.subarray(0, this.used));
    tail[this.used] = 0x80000000 | 0;
    const blocks = this.used + 1 + 2 <= 16 ? 1 : 2;
    tail[blocks * 16 - 2] = Math.floor(bits / 0x100000000);
    tail[blocks * 16 - 1] = bits % 0x100000000;
    for (let b = 0; b < blocks; b++) {
      W.set(tail.subarray(b * 16, b * 16 + 16));
      compress(this.h);
    }
    return hexOf(this.h);
  }
}

// The row loop runs once, whole, when the module loads: V8 then has type feedback for the write-back
// after it when it optimises the loop in the middle of a long row (without it, that optimised code
// was thrown away at the end of every row).
new Int64Sha256().update(new Uint32Array(24));

/** Lowercase hex SHA-256 of `bytes` (a Uint8Array), computed here. */
export function sha256Sync(bytes) {
  const len = bytes.length;
  const blocks = Math.ceil((len + 9) / 64);
  // A short message (a split key's prefix + idx) is padded in one reused buffer: no allocation per key.
  const msg = blocks <= 2 ? SHORT.subarray(0, blocks * 64).fill(0) : new Uint8Array(blocks * 64);
  msg.set(bytes);
  msg[len] = 0x80;
  const bits = len * 8;
  const end = msg.length;
  const high = Math.floor(bits / 0x100000000);
  msg[end - 8] = high >>> 24; msg[end - 7] = high >>> 16; msg[end - 6] = high >>> 8; msg[end - 5] = high;
  msg[end - 4] = bits >>> 24; msg[end - 3] = bits >>> 16; msg[end - 2] = bits >>> 8; msg[end - 1] = bits;
  const h = SHORT_STATE;
  h.set(INITIAL);
  for (let b = 0; b < blocks; b++) {
    for (let t = 0, o = b * 64; t < 16; t++, o += 4) W[t] = (msg[o] << 24) | (msg[o + 1] << 16) | (msg[o + 2] << 8) | msg[o + 3];
    compress(h);
  }
  return hexOf(h);
}
