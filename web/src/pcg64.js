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
// The LCG is done on four 32-bit words held in doubles (every partial sum stays below 2**53), so a
// step costs a few dozen integer operations and no allocation; only the rare 64-bit range uses
// BigInt.

import { PCG64_WASM } from './pcg64.wasm.js';

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

// The multiplier's 32-bit words, least significant first, and 16-bit halves of the three lower ones.
const M0 = 0x9fccf645; const M1 = 0x4385df64; const M2 = 0x1fc65da4; const M3 = 0x2360ed05;
const M0H = M0 >>> 16; const M0L = M0 & 0xffff;
const M1H = M1 >>> 16; const M1L = M1 & 0xffff;
const M2H = M2 >>> 16; const M2L = M2 & 0xffff;
const INV16 = 1 / 65536; // multiplying by a power of two is exact
const INV32 = 1 / M32;
const [W0, W1, W2, W3, I0, I1, I2, I3, HAS_HALF, HALF, HI, LO, STATE_SLOTS] = Array.from({ length: 13 }, (_, i) => i);

/** numpy's PCG64 bit generator (XSL-RR output), seeded as PCG64(seed) is: next64, next32, fill.
 * The 128-bit state is four unsigned 32-bit words held in doubles (w0 least significant). */
export class PCG64 {
  constructor(seed) {
    // The state (w0..w3), the increment (i0..i3), the unused 32-bit half and the last 64-bit output
    // (two unsigned 32-bit halves) live in one Float64Array: fields that change from small integers
    // to doubles would make V8 throw away the hot loop's optimised code again and again.
    this.st = new Float64Array(STATE_SLOTS);
    const w = seedState(seed); // the four uint64 as [lo, hi] pairs: s_hi, s_lo, inc_hi, inc_lo
    // inc = (initseq << 1) | 1 with initseq = (w[4..5] << 64) | w[6..7]
    const seq = [w[6], w[7], w[4], w[5]]; // least significant first
    this.st[I0] = ((seq[0] << 1) | 1) >>> 0;
    this.st[I1] = ((seq[1] << 1) | (seq[0] >>> 31)) >>> 0;
    this.st[I2] = ((seq[2] << 1) | (seq[1] >>> 31)) >>> 0;
    this.st[I3] = ((seq[3] << 1) | (seq[2] >>> 31)) >>> 0;
    this.step();
    const init = [w[2], w[3], w[0], w[1]]; // initstate = (w[0..1] << 64) | w[2..3], least significant first
    let r = this.st[W0] + init[0];
    let k = r >= M32 ? 1 : 0;
    this.st[W0] = r - k * M32;
    r = this.st[W1] + init[1] + k;
    k = r >= M32 ? 1 : 0;
    this.st[W1] = r - k * M32;
    r = this.st[W2] + init[2] + k;
    k = r >= M32 ? 1 : 0;
    this.st[W2] = r - k * M32;
    this.st[W3] = (this.st[W3] + init[3] + k) >>> 0;
    this.step();
  }

  /** state = state * multiplier + inc (mod 2**128): products of 32-bit words, each high half formed
   * exactly from 16-bit halves of the multiplier (every partial sum below 2**53), the low halves by
   * Math.imul. */
  step() {
    const w0 = this.st[W0]; const w1 = this.st[W1]; const w2 = this.st[W2]; const w3 = this.st[W3];
    const h00 = Math.floor((w0 * M0H + Math.floor(w0 * M0L * INV16)) * INV16);
    const h01 = Math.floor((w0 * M1H + Math.floor(w0 * M1L * INV16)) * INV16);
    const h10 = Math.floor((w1 * M0H + Math.floor(w1 * M0L * INV16)) * INV16);
    const h02 = Math.floor((w0 * M2H + Math.floor(w0 * M2L * INV16)) * INV16);
    const h11 = Math.floor((w1 * M1H + Math.floor(w1 * M1L * INV16)) * INV16);
    const h20 = Math.floor((w2 * M0H + Math.floor(w2 * M0L * INV16)) * INV16);
    let r = (Math.imul(w0, M0) >>> 0) + this.st[I0];
    let k = r >= M32 ? 1 : 0;
    this.st[W0] = r - k * M32;
    r = h00 + (Math.imul(w0, M1) >>> 0) + (Math.imul(w1, M0) >>> 0) + this.st[I1] + k;
    k = Math.floor(r * INV32);
    this.st[W1] = r - k * M32;
    r = h01 + h10 + (Math.imul(w0, M2) >>> 0) + (Math.imul(w1, M1) >>> 0) + (Math.imul(w2, M0) >>> 0) + this.st[I2] + k;
    k = Math.floor(r * INV32);
    this.st[W2] = r - k * M32;
    this.st[W3] = (h02 + h11 + h20 + Math.imul(w0, M3) + Math.imul(w1, M2) + Math.imul(w2, M1) + Math.imul(w3, M0)
      + this.st[I3] + k) >>> 0;
  }

  /** One 64-bit output into this.st[HI] and this.st[LO]: XSL-RR of the stepped state, (high 64 bits xor
   * low 64 bits) rotated right by the state's top six bits. */
  next64() {
    this.step();
    let h = (this.st[W3] ^ this.st[W1]) >>> 0;
    let l = (this.st[W2] ^ this.st[W0]) >>> 0;
    let r = this.st[W3] >>> 26;
    if (r >= 32) {
      const t = h;
      h = l;
      l = t;
      r -= 32;
    }
    if (r === 0) {
      this.st[HI] = h;
      this.st[LO] = l;
    } else {
      this.st[HI] = ((h >>> r) | (l << (32 - r))) >>> 0;
      this.st[LO] = ((l >>> r) | (h << (32 - r))) >>> 0;
    }
  }

  /** One 32-bit draw: the low half of a fresh 64-bit output, then its high half. */
  next32() {
    if (this.st[HAS_HALF] === 1) {
      this.st[HAS_HALF] = 0;
      return this.st[HALF];
    }
    this.next64();
    this.st[HAS_HALF] = 1;
    this.st[HALF] = this.st[HI];
    return this.st[LO];
  }

  /** Lemire's bounded draw on 32-bit draws, n < 2**32 - 1: m = x * n, leftover = m mod 2**32, the
   * draw m >> 32, rejected while leftover < (2**32 - n) mod n; the 64-bit product formed from 16-bit
   * halves of x, exactly. The hot loop of the bootstrap: step() and next64() written out in line on
   * locals (object fields holding doubles cost a load and a store each, three times the arithmetic). */
  fillLemire32(out, n, counts = null) {
    if (wasm !== null) {
      wasmLemire32(this.st, out, n, counts);
      return;
    }
    this.fillLemire32Js(out, n);
    if (counts !== null) countDraws(out, counts);
  }

  /** fillLemire32 in JavaScript (where WebAssembly is refused, and the reference it is checked against). */
  fillLemire32Js(out, n) {
    const len = out.length;
    const threshold = (M32 - n) % n;
    const st = this.st;
    const i0 = st[I0]; const i1 = st[I1]; const i2 = st[I2]; const i3 = st[I3];
    let w0 = st[W0]; let w1 = st[W1]; let w2 = st[W2]; let w3 = st[W3];
    let hasHalf = st[HAS_HALF] === 1;
    let half = st[HALF];
    let hi = st[HI];
    let lo = st[LO];
    for (let i = 0; i < len; i++) {
      let x;
      let leftover;
      do {
        if (hasHalf) {
          hasHalf = false;
          x = half;
        } else {
          const h00 = Math.floor((w0 * M0H + Math.floor(w0 * M0L * INV16)) * INV16);
          const h01 = Math.floor((w0 * M1H + Math.floor(w0 * M1L * INV16)) * INV16);
          const h10 = Math.floor((w1 * M0H + Math.floor(w1 * M0L * INV16)) * INV16);
          const h02 = Math.floor((w0 * M2H + Math.floor(w0 * M2L * INV16)) * INV16);
          const h11 = Math.floor((w1 * M1H + Math.floor(w1 * M1L * INV16)) * INV16);
          const h20 = Math.floor((w2 * M0H + Math.floor(w2 * M0L * INV16)) * INV16);
          let t = (Math.imul(w0, M0) >>> 0) + i0;
          let k = t >= M32 ? 1 : 0;
          const n0 = t - k * M32;
          t = h00 + (Math.imul(w0, M1) >>> 0) + (Math.imul(w1, M0) >>> 0) + i1 + k;
          k = Math.floor(t * INV32);
          const n1 = t - k * M32;
          t = h01 + h10 + (Math.imul(w0, M2) >>> 0) + (Math.imul(w1, M1) >>> 0) + (Math.imul(w2, M0) >>> 0) + i2 + k;
          k = Math.floor(t * INV32);
          const n2 = t - k * M32;
          w3 = (h02 + h11 + h20 + Math.imul(w0, M3) + Math.imul(w1, M2) + Math.imul(w2, M1) + Math.imul(w3, M0) + i3 + k) >>> 0;
          w0 = n0; w1 = n1; w2 = n2;
          let h = (w3 ^ w1) >>> 0;
          let l = (w2 ^ w0) >>> 0;
          let rot = w3 >>> 26;
          if (rot >= 32) {
            const swap = h;
            h = l;
            l = swap;
            rot -= 32;
          }
          if (rot === 0) {
            hi = h;
            lo = l;
          } else {
            hi = ((h >>> rot) | (l << (32 - rot))) >>> 0;
            lo = ((l >>> rot) | (h << (32 - rot))) >>> 0;
          }
          hasHalf = true;
          half = hi;
          x = lo;
        }
        leftover = Math.imul(x, n) >>> 0;
      } while (leftover < threshold);
      out[i] = Math.floor(((x >>> 16) * n + Math.floor((x & 0xffff) * n * INV16)) * INV16);
    }
    st[W0] = w0; st[W1] = w1; st[W2] = w2; st[W3] = w3;
    st[HAS_HALF] = hasHalf ? 1 : 0;
    st[HALF] = half;
    st[HI] = hi;
    st[LO] = lo;
  }

  /** One 64-bit output as a BigInt. */
  next64Big() {
    this.next64();
    return (BigInt(this.st[HI]) << 32n) | BigInt(this.st[LO]);
  }

  /** `out.length` draws of integers(0, n) into `out` (a Uint32Array when n <= 2**32, else a
   * Float64Array), continuing the generator's stream as numpy's next call would; with `counts`
   * (a Float64Array of n), also how often each of 0..n-1 was drawn. */
  fill(out, n, counts = null) {
    const len = out.length;
    if (!(Number.isSafeInteger(n) && n >= 1)) throw new RangeError(`the range must be a positive integer, not ${n}`);
    const r = n - 1;
    if (r === 0) {
      out.fill(0);
    } else if (r === MASK32) {
      for (let i = 0; i < len; i++) out[i] = this.next32();
    } else if (r < MASK32) {
      this.fillLemire32(out, n, counts);
      return out;
    } else {
      const big = BigInt(n);
      const threshold = ((1n << 64n) - big) % big;
      for (let i = 0; i < len; i++) {
        let m = this.next64Big() * big;
        while ((m & 0xffffffffffffffffn) < threshold) m = this.next64Big() * big;
        out[i] = Number(m >> 64n);
      }
    }
    if (counts !== null) countDraws(out, counts);
    return out;
  }
}

// The same loop in WebAssembly (web/wasm/pcg64.wat, 64-bit arithmetic: several times faster), used
// when the page may instantiate it and it draws what the JavaScript loop draws on a test matrix when
// the module loads (every rejection path of a range that rejects half its draws, a buffered half
// carried across calls); else null, and the JavaScript loop draws. The state goes in and out of its
// memory as 32-bit words on each call.
const STATE_WORDS = 10; // w0..w3, i0..i3, the half's flag, the half
const OUT_AT = 64;

function instantiate() {
  if (typeof WebAssembly !== 'object' || new Uint8Array(new Uint32Array([1]).buffer)[0] !== 1) return null;
  try {
    const bytes = Uint8Array.from(atob(PCG64_WASM), (c) => c.charCodeAt(0));
    const { exports } = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
    return { fill: exports.fill, memory: exports.memory };
  } catch {
    return null; // refused (a CSP without 'wasm-unsafe-eval'): the JavaScript loop draws
  }
}

let wasm = instantiate();

/** counts[i] = how often i occurs in row (counts zeroed first). */
export function countDraws(row, counts) {
  counts.fill(0);
  const len = row.length;
  for (let r = 0; r < len; r++) counts[row[r]] += 1;
}

function wasmLemire32(st, out, n, counts = null) {
  const len = out.length;
  const countsAt = OUT_AT + 8 * Math.ceil(len / 2);
  const need = counts === null ? OUT_AT + 4 * len : countsAt + 8 * n;
  if (wasm.memory.buffer.byteLength < need) wasm.memory.grow(Math.ceil((need - wasm.memory.buffer.byteLength) / 65536));
  const words = new Uint32Array(wasm.memory.buffer, 0, STATE_WORDS);
  words[0] = st[W0]; words[1] = st[W1]; words[2] = st[W2]; words[3] = st[W3];
  words[4] = st[I0]; words[5] = st[I1]; words[6] = st[I2]; words[7] = st[I3];
  words[8] = st[HAS_HALF]; words[9] = st[HALF];
  wasm.fill(len, n, (M32 - n) % n, counts === null ? 0 : countsAt);
  st[W0] = words[0]; st[W1] = words[1]; st[W2] = words[2]; st[W3] = words[3];
  st[HAS_HALF] = words[8]; st[HALF] = words[9];
  out.set(new Uint32Array(wasm.memory.buffer, OUT_AT, len));
  if (counts !== null) counts.set(new Float64Array(wasm.memory.buffer, countsAt, n));
}

if (wasm !== null) {
  const a = new PCG64(20240508);
  const b = new PCG64(20240508);
  const x = new Uint32Array(257);
  const y = new Uint32Array(257);
  let same = true;
  for (const n of [0x80000001, 360, 0xfffffffe, 3]) {
    wasmLemire32(a.st, x, n);
    b.fillLemire32Js(y, n);
    same = same && x.every((v, i) => v === y[i]) && a.st.every((v, i) => i === HI || i === LO || v === b.st[i]);
  }
  // the counts of a row of 257 draws of integers(0, 257)
  const counts = new Float64Array(257);
  const want = new Float64Array(257);
  wasmLemire32(a.st, x, 257, counts);
  b.fillLemire32Js(y, 257);
  countDraws(y, want);
  same = same && x.every((v, i) => v === y[i]) && counts.every((v, i) => v === want[i]);
  if (!same) wasm = null;
}

/** Whether the draws go through WebAssembly ('wasm') or JavaScript ('js'), for the tests. */
export const drawsBy = () => (wasm === null ? 'js' : 'wasm');

// The hot loop runs once, whole, on a throwaway generator when the module loads: V8 then has type
// feedback for every statement of it (the draw's store, the rejection, the state's write-back) when
// it optimises the loop in the middle of a long row; without it, that optimised code was thrown away
// at the end of every row, and the rows were drawn at half speed.
new PCG64(0).fillLemire32Js(new Uint32Array(64), 0x80000001);

/**
 * The rows of integers(0, n, size=(resamples, n)) for PCG64(seed), in order: yields `resamples`
 * times the same buffer (a Uint32Array of n, a Float64Array when n > 2**32), refilled with the
 * next row; copy a row to keep it. With `counts` (a Float64Array of n), each row's draw counts are
 * written there as it is drawn. Memory is one row whatever the matrix's size.
 */
export function* resampleRows(seed, n, resamples, counts = null) {
  const rng = new PCG64(seed);
  const row = n <= M32 ? new Uint32Array(n) : new Float64Array(n);
  for (let b = 0; b < resamples; b++) yield rng.fill(row, n, counts);
}
