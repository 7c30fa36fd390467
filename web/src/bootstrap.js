// The paired bootstrap of the calibration effect (data/bootstrap.json), recomputed from the audit
// logits as FORMAT.md and the protocol's `bootstrap` section define it: the resample matrix is
// numpy's Generator(PCG64(seed)).integers(0, n, size=(resamples, n)) (pcg64.js), each resample's
// drawn rows (repeats counted) are scored raw (beta = 1) and calibrated (the record's beta), each
// metric as metrics.json defines it, and the statistic is calibrated minus raw; the interval is
// numpy.quantile(differences, quantiles, method='linear').
//
// Streaming: one row of the matrix at a time (a Uint32Array of n, reused, and its draw counts),
// hashed into indices_sha256 and scored at once (resamples.js), so memory is a few arrays of n
// whatever the resample count. A metric that is a mean over the drawn rows is the sum of per-row
// values times their draw counts / n; the ECE of a resample is sum over bins |sum over its rows in
// the bin of draws x (correct - confidence)| / n.

import { int64Sha256 } from './int64hash.js';

/* global HASH_WORKER_CODE */ // hashworker.js as one script, defined by build.mjs (absent under node)
import { N_BINS, firstArgmax, rowScores } from './numerics.js';
import { ResampleMatrix, feedResamples } from './resamples.js';

export const METRICS = ['nll', 'brier', 'ece'];

/** The ECE bin of a confidence: edges k/10, lower edge inclusive, 1.0 in the last bin; -1 outside [0, 1]. */
export function binOf(c) {
  for (let b = 0; b < N_BINS; b++) {
    const lower = b / N_BINS;
    const upper = (b + 1) / N_BINS;
    if (b === N_BINS - 1 ? c >= lower && c <= upper : c >= lower && c < upper) return b;
  }
  return -1;
}

/** Per-row values at inverse temperature beta: -log p_y, the Brier sum, correct - confidence and the
 * confidence's bin ({nll, brier, gap: Float64Array(n), bin: Uint8Array(n)}); correct is the first
 * argmax of the logits against the label, whatever beta. */
export function rowTerms(pool, beta) {
  const { n, k, z, y } = pool;
  const nll = new Float64Array(n);
  const brier = new Float64Array(n);
  const gap = new Float64Array(n);
  const bin = new Uint8Array(n);
  const lp = new Float64Array(k);
  const scores = new Float64Array(2);
  for (let i = 0; i < n; i++) {
    const off = i * k;
    rowScores(z, off, k, beta, y[i], lp, scores);
    const top = scores[0];
    const b = scores[1];
    nll[i] = -lp[y[i]];
    brier[i] = b;
    const at = binOf(top);
    if (at < 0) throw new RangeError(`row ${i}'s confidence ${top} fell outside [0, 1]`);
    bin[i] = at;
    gap[i] = (firstArgmax(z, off, k) === y[i] ? 1 : 0) - top;
  }
  return { nll, brier, gap, bin };
}

/**
 * The bootstrap's consumer of a resample pass (resamples.js): each resample's calibrated-minus-raw
 * NLL, Brier and ECE from its draw counts (`result()`: {nll, brier, ece}: Float64Array of
 * `resamples`), for the audit `pool` at inverse temperature `beta`. A sum over the drawn rows is
 * the sum over the pool's rows of draws x the row's value, taken in pool order (one sequential
 * pass, where the drawn rows' order would read the terms at random).
 */
export class BootstrapScorer {
  constructor(pool, beta, resamples) {
    const { n } = pool;
    const raw = rowTerms(pool, 1);
    const cal = rowTerms(pool, beta);
    // Interleaved per row: nll raw, nll cal, brier raw, brier cal, gap raw, gap cal.
    const terms = new Float64Array(6 * n);
    const bins = new Uint8Array(2 * n);
    for (let i = 0; i < n; i++) {
      terms[6 * i] = raw.nll[i];
      terms[6 * i + 1] = cal.nll[i];
      terms[6 * i + 2] = raw.brier[i];
      terms[6 * i + 3] = cal.brier[i];
      terms[6 * i + 4] = raw.gap[i];
      terms[6 * i + 5] = cal.gap[i];
      bins[2 * i] = raw.bin[i];
      bins[2 * i + 1] = cal.bin[i];
    }
    this.n = n;
    this.terms = terms;
    this.bins = bins;
    this.eceRaw = new Float64Array(N_BINS);
    this.eceCal = new Float64Array(N_BINS);
    this.out = { nll: new Float64Array(resamples), brier: new Float64Array(resamples), ece: new Float64Array(resamples) };
    this.b = 0;
  }

  add(row, counts) {
    scoreCounts(counts, this.n, this.terms, this.bins, this.eceRaw, this.eceCal, this.out, this.b);
    this.b++;
  }

  result() {
    return this.out;
  }
}

/** The consumer that hashes the rows as little-endian int64 into indices_sha256 (`await hex()`);
 * made by `await IndicesHasher.create()`: in a Web Worker where the page can start one
 * (hashworker.js, concurrently with the drawing and scoring), else on this thread. */
export class IndicesHasher {
  constructor(digest) {
    this.digest = digest;
  }

  static async create() {
    const worker = await WorkerInt64Sha256.start();
    return new IndicesHasher(worker || await int64Sha256());
  }

  add(row) {
    this.digest.update(row);
  }

  /** A promise while the worker still has rows in hand (resamples.js awaits it), else null. */
  wait() {
    return this.digest.wait ? this.digest.wait() : null;
  }

  async hex() {
    return this.digest.hex();
  }

  /** Let go of a hasher whose digest will not be asked for (its worker stopped). */
  close() {
    if (this.digest.close) this.digest.close();
  }
}

/** The stream hashed by hashworker.js: each row copied into one of a few buffers that travel to the
 * worker and back (at most WORKER_ROWS rows in flight: bounded memory whatever the count). */
const WORKER_ROWS = 8;

class WorkerInt64Sha256 {
  /** A started worker's hasher, or null where none can start (no Worker, no worker code in this
   * build, a CSP that refuses it, an error or no answer within 10 s). */
  static async start() {
    if (typeof Worker !== 'function' || typeof HASH_WORKER_CODE !== 'string') return null;
    let url = null;
    try {
      url = URL.createObjectURL(new Blob([HASH_WORKER_CODE], { type: 'text/javascript' }));
      const worker = new Worker(url);
      const ready = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), 10000);
        worker.onmessage = (e) => {
          clearTimeout(timer);
          resolve(Boolean(e.data && e.data.ready));
        };
        worker.onerror = () => {
          clearTimeout(timer);
          resolve(false);
        };
      });
      if (!ready) {
        worker.terminate();
        return null;
      }
      return new WorkerInt64Sha256(worker);
    } catch {
      return null;
    } finally {
      if (url !== null) URL.revokeObjectURL(url);
    }
  }

  constructor(worker) {
    this.worker = worker;
    this.free = [];
    this.inFlight = 0;
    this.waiting = null; // resolve() of the pass waiting for a buffer
    this.failure = null;
    this.finished = null; // resolve() of hex()
    worker.onmessage = (e) => this.receive(e.data);
    worker.onerror = (e) => this.receive({ error: String(e && e.message) });
    worker.onmessageerror = () => this.receive({ error: 'a message could not be read' });
  }

  receive(data) {
    if (data.row) {
      this.inFlight--;
      this.free.push(data.row);
    } else if (data.hex !== undefined) {
      this.result = data.hex;
    } else {
      this.failure = new Error(`the hashing worker failed: ${data.error}`);
      this.worker.terminate();
    }
    if (this.waiting && (this.inFlight < WORKER_ROWS || this.failure)) {
      const resolve = this.waiting;
      this.waiting = null;
      resolve();
    }
    if (this.finished && (this.result !== undefined || this.failure)) this.finished();
  }

  /** Send a copy of the row to the worker (nothing once it has failed: hex() then says so). */
  update(row) {
    if (this.failure) return;
    let buffer = this.free.pop();
    if (!buffer || buffer.length !== row.length || buffer.constructor !== row.constructor) buffer = new row.constructor(row.length);
    buffer.set(row);
    this.inFlight++;
    this.worker.postMessage({ row: buffer }, [buffer.buffer]);
  }

  wait() {
    if (this.inFlight < WORKER_ROWS && !this.failure) return null;
    return new Promise((resolve) => {
      this.waiting = resolve;
    });
  }

  /** Stop the worker (a pass that ended early). */
  close() {
    this.worker.terminate();
  }

  async hex() {
    if (!this.failure) this.worker.postMessage({ end: true });
    await new Promise((resolve) => {
      this.finished = resolve;
      if (this.result !== undefined || this.failure) resolve();
    });
    this.worker.terminate();
    if (this.failure) throw this.failure;
    return this.result;
  }
}

/**
 * Every resample's calibrated-minus-raw NLL, Brier and ECE ({nll, brier, ece}: Float64Array of
 * `resamples`) and the sha256 of the resample matrix as little-endian int64 (`indicesSha256`), for the
 * audit `pool` at inverse temperature `beta`. `pause` (optional, awaited) is called about every
 * 50 ms so that the page can paint while a large matrix is drawn.
 */
export async function pairedBootstrap(pool, beta, seed, resamples, pause = null) {
  const scorer = new BootstrapScorer(pool, beta, resamples);
  const matrix = new ResampleMatrix(seed, pool.n, resamples);
  const hasher = await IndicesHasher.create();
  await feedResamples(matrix, pool.n, [hasher, scorer], [], pause);
  let indicesSha256;
  try {
    indicesSha256 = await hasher.hex();
  } catch {
    // the hashing worker failed: the matrix drawn again and hashed on this thread
    const local = new IndicesHasher(await int64Sha256());
    await feedResamples(matrix, pool.n, [local], [], pause);
    indicesSha256 = await local.hex();
  }
  return { ...scorer.result(), indicesSha256 };
}

/** Resample b's calibrated-minus-raw NLL, Brier and ECE into out.nll[b], out.brier[b], out.ece[b],
 * from its draw counts and the interleaved per-row terms (a plain function: V8 optimises it whole). */
function scoreCounts(counts, n, terms, bins, eceRaw, eceCal, out, b) {
  let nllRaw = 0;
  let nllCal = 0;
  let brierRaw = 0;
  let brierCal = 0;
  eceRaw.fill(0);
  eceCal.fill(0);
  for (let i = 0; i < n; i++) {
    const w = counts[i]; // 0 for a row not drawn: it adds 0
    const o = 6 * i;
    nllRaw += w * terms[o];
    nllCal += w * terms[o + 1];
    brierRaw += w * terms[o + 2];
    brierCal += w * terms[o + 3];
    eceRaw[bins[2 * i]] += w * terms[o + 4];
    eceCal[bins[2 * i + 1]] += w * terms[o + 5];
  }
  let er = 0;
  let ec = 0;
  for (let k = 0; k < N_BINS; k++) {
    er += Math.abs(eceRaw[k] / n);
    ec += Math.abs(eceCal[k] / n);
  }
  out.nll[b] = nllCal / n - nllRaw / n;
  out.brier[b] = brierCal / n - brierRaw / n;
  out.ece[b] = ec - er;
}

/** numpy.quantile(values, q, method='linear') of an array sorted ascending: the virtual index
 * (len - 1) q between its neighbours, interpolated as numpy's _lerp does (from the upper neighbour
 * when the fraction is at least 1/2). */
export function quantileLinear(sorted, q) {
  const last = sorted.length - 1;
  const h = last * q;
  const lo = Math.min(Math.max(Math.floor(h), 0), last);
  const hi = Math.min(lo + 1, last);
  const t = h - lo;
  const a = sorted[lo];
  const diff = sorted[hi] - a;
  return t >= 0.5 ? sorted[hi] - diff * (1 - t) : a + diff * t;
}

/** FORMAT.md's verdict on an interval of a change. */
export function intervalVerdict(lower, upper) {
  if (upper < 0) return 'decrease';
  if (lower > 0) return 'increase';
  return 'no claim';
}
