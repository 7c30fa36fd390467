// The bootstrap's resample matrix, drawn here as numpy draws it (protocol "bootstrap.rng"):
//
//   numpy.random.Generator(numpy.random.PCG64(seed)).integers(0, n, size=(resamples, n))   (int64)
//
// written from numpy's specification of its parts, which are stable across numpy versions:
// - SeedSequence(seed): the seed's 32-bit words (little end first; 0 is one word) mixed into a
//   pool of four words by the hashmix and mix functions, then four 64-bit words drawn from the pool;
// - PCG64: a 128-bit LCG (multiplier 0x2360ed051fc65da44385df649fccf645) seeded with state = words
//   0..1 and increment = words 2..3 (high word first) by the PCG "srandom" rule, each output the
//   XSL-RR of the state after one step;
// - integers(0, n) with int64 dtype: with r = n - 1, nothing drawn when r = 0; for r < 2**32 - 1,
//   Lemire's multiply-and-reject on 32-bit draws, which are the low then the high half of each 64-bit
//   output (the generator keeps an unused half for the next draw, across rows and calls); for
//   r = 2**32 - 1 the 32-bit draws themselves; for larger r, Lemire on 64-bit outputs.
//
// The LCG is done on eight 16-bit limbs held in doubles (every partial sum stays below 2**53), so a
// step costs a few dozen integer-valued float operations and no allocation; only the rare 64-bit
// range uses BigInt.

const MASK32 = 0xffffffff;
const M32 = 0x100000000;

// -- SeedSequence ---------------------------------------------------------------------------------

const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const POOL_SIZE = 4;

/** The 32-bit words of a non-negative integer seed, least significant first (0 is [0]). */
export function seedWords(seed) {
  let s = BigInt(seed);
  if (s < 0n) throw new RangeError('the seed must be a non-negative integer');
  if (s === 0n) return [0];
  const words = [];
  while (s > 0n) {
    words.push(Number(s & 0xffffffffn));
    s >>= 32n;
  }
  return words;
}

/** SeedSequence(seed).generate_state(4, uint64) as eight 32-bit words (low word of each first). */
export function seedState(seed) {
  const entropy = seedWords(seed);
  let hashConst = INIT_A;
  const hashmix = (value) => {
    let v = (value ^ hashConst) >>> 0;
    hashConst = Math.imul(hashConst, MULT_A) >>> 0;
    v = Math.imul(v, hashConst) >>> 0;
    return (v ^ (v >>> 16)) >>> 0;
  };
  const mix = (x, y) => {
    const r = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
    return (r ^ (r >>> 16)) >>> 0;
  };
  const pool = new Array(POOL_SIZE);
  for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < entropy.length ? entropy[i] : 0);
  for (let src = 0; src < POOL_SIZE; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) if (src !== dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  }
  for (let src = POOL_SIZE; src < entropy.length; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  }
  const out = [];
  let h = INIT_B;
  for (let i = 0; i < 8; i++) {
    let v = (pool[i % POOL_SIZE] ^ h) >>> 0;
    h = Math.imul(h, MULT_B) >>> 0;
    v = Math.imul(v, h) >>> 0;
    out.push((v ^ (v >>> 16)) >>> 0);
  }
  return out;
}

// -- PCG64 ----------------------------------------------------------------------------------------

// The multiplier's 16-bit limbs, least significant first.
const A0 = 0xf645; const A1 = 0x9fcc; const A2 = 0xdf64; const A3 = 0x4385;
const A4 = 0x5da4; const A5 = 0x1fc6; const A6 = 0xed05; const A7 = 0x2360;

/** 128-bit integers as eight 16-bit limbs (least significant first) from four 32-bit words (most significant first). */
function limbs(w3, w2, w1, w0) {
  return [w0 & 0xffff, w0 >>> 16, w1 & 0xffff, w1 >>> 16, w2 & 0xffff, w2 >>> 16, w3 & 0xffff, w3 >>> 16];
}

/** numpy's PCG64 bit generator (XSL-RR output), seeded as PCG64(seed) is: next64, next32. */
export class PCG64 {
  constructor(seed) {
    const w = seedState(seed); // words of the four uint64: [s0 lo, s0 hi, s1 lo, s1 hi, i0 lo, i0 hi, i1 lo, i1 hi]
    const initState = limbs(w[1], w[0], w[3], w[2]); // (s0 << 64) | s1
    const initSeq = limbs(w[5], w[4], w[7], w[6]); // (i0 << 64) | i1
    // inc = (initseq << 1) | 1, mod 2**128
    this.inc = new Float64Array(8);
    let carry = 1;
    for (let k = 0; k < 8; k++) {
      const v = initSeq[k] * 2 + carry;
      this.inc[k] = v & 0xffff;
      carry = v >>> 16;
    }
    this.s = new Float64Array(8); // state 0
    this.hasHalf = false;
    this.half = 0;
    this.hi = 0; // the last 64-bit output, as two 32-bit halves
    this.lo = 0;
    this.step();
    carry = 0;
    for (let k = 0; k < 8; k++) {
      const v = this.s[k] + initState[k] + carry;
      this.s[k] = v & 0xffff;
      carry = v >>> 16;
    }
    this.step();
  }

  /** state = state * multiplier + inc (mod 2**128). */
  step() {
    const s = this.s;
    const c = this.inc;
    const s0 = s[0]; const s1 = s[1]; const s2 = s[2]; const s3 = s[3];
    const s4 = s[4]; const s5 = s[5]; const s6 = s[6]; const s7 = s[7];
    let t = s0 * A0 + c[0];
    s[0] = t & 0xffff;
    t = (t - s[0]) / 65536 + s0 * A1 + s1 * A0 + c[1];
    s[1] = t & 0xffff;
    t = (t - s[1]) / 65536 + s0 * A2 + s1 * A1 + s2 * A0 + c[2];
    s[2] = t & 0xffff;
    t = (t - s[2]) / 65536 + s0 * A3 + s1 * A2 + s2 * A1 + s3 * A0 + c[3];
    s[3] = t & 0xffff;
    t = (t - s[3]) / 65536 + s0 * A4 + s1 * A3 + s2 * A2 + s3 * A1 + s4 * A0 + c[4];
    s[4] = t & 0xffff;
    t = (t - s[4]) / 65536 + s0 * A5 + s1 * A4 + s2 * A3 + s3 * A2 + s4 * A1 + s5 * A0 + c[5];
    s[5] = t & 0xffff;
    t = (t - s[5]) / 65536 + s0 * A6 + s1 * A5 + s2 * A4 + s3 * A3 + s4 * A2 + s5 * A1 + s6 * A0 + c[6];
    s[6] = t & 0xffff;
    t = (t - s[6]) / 65536 + s0 * A7 + s1 * A6 + s2 * A5 + s3 * A4 + s4 * A3 + s5 * A2 + s6 * A1 + s7 * A0 + c[7];
    s[7] = t & 0xffff;
  }

  /** One 64-bit output into this.hi and this.lo (unsigned 32-bit halves). */
  next64() {
    this.step();
    const s = this.s;
    const xh = (((s[7] << 16) | s[6]) ^ ((s[3] << 16) | s[2])) >>> 0;
    const xl = (((s[5] << 16) | s[4]) ^ ((s[1] << 16) | s[0])) >>> 0;
    let r = s[7] >>> 10; // the state's top six bits
    let h = xh;
    let l = xl;
    if (r >= 32) {
      h = xl;
      l = xh;
      r -= 32;
    }
    if (r === 0) {
      this.hi = h;
      this.lo = l;
    } else {
      this.hi = ((h >>> r) | (l << (32 - r))) >>> 0;
      this.lo = ((l >>> r) | (h << (32 - r))) >>> 0;
    }
  }

  /** One 32-bit draw: the low half of a fresh 64-bit output, then its high half. */
  next32() {
    if (this.hasHalf) {
      this.hasHalf = false;
      return this.half;
    }
    this.next64();
    this.hasHalf = true;
    this.half = this.hi;
    return this.lo;
  }

  /** One 64-bit output as a BigInt. */
  next64Big() {
    this.next64();
    return (BigInt(this.hi) << 32n) | BigInt(this.lo);
  }

  /** `out.length` draws of integers(0, n) into `out` (a Uint32Array when n <= 2**32, else a
   * Float64Array), continuing the generator's stream as numpy's next call would. */
  fill(out, n) {
    const len = out.length;
    if (!(Number.isSafeInteger(n) && n >= 1)) throw new RangeError(`the range must be a positive integer, not ${n}`);
    const r = n - 1;
    if (r === 0) {
      out.fill(0);
    } else if (r === MASK32) {
      for (let i = 0; i < len; i++) out[i] = this.next32();
    } else if (r < MASK32) {
      this.fillLemire32(out, n);
    } else {
      const big = BigInt(n);
      const threshold = ((1n << 64n) - big) % big;
      for (let i = 0; i < len; i++) {
        let m = this.next64Big() * big;
        let leftover = m & 0xffffffffffffffffn;
        if (leftover < big) {
          while (leftover < threshold) {
            m = this.next64Big() * big;
            leftover = m & 0xffffffffffffffffn;
          }
        }
        out[i] = Number(m >> 64n);
      }
    }
    return out;
  }

  /** Lemire's bounded draw on 32-bit draws, n < 2**32: m = x * n, leftover = m mod 2**32, the draw
   * m >> 32; rejected while leftover < (2**32 - n) mod n. The 64-bit product is formed from 16-bit
   * halves of x, exactly, in doubles. */
  fillLemire32(out, n) {
    const len = out.length;
    const threshold = (M32 - n) % n;
    for (let i = 0; i < len; i++) {
      for (;;) {
        const x = this.next32();
        const leftover = Math.imul(x, n) >>> 0;
        if (leftover < n && leftover < threshold) continue;
        const high = (x >>> 16) * n + Math.floor(((x & 0xffff) * n) / 65536);
        out[i] = Math.floor(high / 65536);
        break;
      }
    }
  }
}

/**
 * The rows of integers(0, n, size=(resamples, n)) for PCG64(seed), in order: yields `resamples`
 * times the same buffer (a Uint32Array of n, a Float64Array when n > 2**32), refilled with the
 * next row; copy a row to keep it. Memory is one row whatever the matrix's size.
 */
export function* resampleRows(seed, n, resamples) {
  const rng = new PCG64(seed);
  const row = n <= M32 ? new Uint32Array(n) : new Float64Array(n);
  for (let b = 0; b < resamples; b++) yield rng.fill(row, n);
}
