// One pass over the bootstrap's resample matrix (pcg64.js), shared by whoever scores it.
//
// `bootstrap.intervals` and `metrics.estimators` score the same matrix when their seed, n and
// resample count agree (FORMAT.md: the estimators' intervals "use the same resample matrix as
// bootstrap.json"). Drawing it is 99 million draws on a 50,000-row bundle, so the page draws each
// row once and hands it to every consumer: its drawn rows (draw order) and its draw counts (how
// often each audit position was drawn), which both scorers read. Memory: one row and one count
// array, whatever the resample count.

import { countDraws, resampleRows } from './pcg64.js';

/** The matrix numpy's Generator(PCG64(seed)).integers(0, n, size=(resamples, n)) draws. */
export class ResampleMatrix {
  constructor(seed, n, resamples) {
    this.seed = BigInt(seed);
    this.n = n;
    this.resamples = resamples;
  }

  /** Whether `other` is the same matrix (same seed, n and resample count). */
  same(other) {
    return other instanceof ResampleMatrix && other.seed === this.seed && other.n === this.n && other.resamples === this.resamples;
  }

  /** The rows in order (one reused buffer); with `counts`, each row's draw counts written there. */
  rows(counts = null) {
    return resampleRows(this.seed, this.n, this.resamples, counts);
  }
}

/**
 * Feed every row of `source` (a ResampleMatrix, or an iterable of index rows of n positions each)
 * to `consumers`, in order: each gets `add(row, counts)` (counts: Float64Array of n; both arrays
 * are reused, so a consumer copies what it keeps). `riders` are consumers that come along: one
 * that throws is dropped (and marked `failed`), the pass goes on for the others, so a rider's
 * failure never changes what the consumers compute. A consumer with `wait()` (a promise, or null)
 * is awaited after each row while it has too much in hand (the hashing worker's rows in flight).
 * `pause` (optional, awaited) is called about every 50 ms so that the page can paint.
 */
export async function feedResamples(source, n, consumers, riders = [], pause = null) {
  const counts = new Float64Array(n);
  const drawn = source instanceof ResampleMatrix; // counted as drawn (pcg64.js)
  const rows = drawn ? source.rows(counts) : source;
  let live = riders.slice();
  let last = performance.now();
  for (const row of rows) {
    if (!drawn) countDraws(row, counts);
    for (let c = 0; c < consumers.length; c++) consumers[c].add(row, counts);
    for (let c = 0; c < consumers.length; c++) {
      const wait = consumers[c].wait ? consumers[c].wait() : null;
      if (wait) await wait;
    }
    for (let c = 0; c < live.length; c++) {
      try {
        live[c].add(row, counts);
      } catch (e) {
        const gone = live[c];
        gone.failed = e;
        live = live.filter((r) => r !== gone);
        c--;
      }
    }
    for (let c = 0; c < live.length; c++) {
      const wait = live[c].wait ? live[c].wait() : null;
      if (wait) await wait;
    }
    if (pause && performance.now() - last > 50) {
      await pause();
      last = performance.now();
    }
  }
}
