// The protocol's figures recomputed from the float32 logits in float64, written again from the
// protocol text (provenance.json "metrics" and "fit"): log-probabilities by logsumexp with the
// row maximum subtracted, the reliability table by explicit comparisons with the edges k/10, the
// temperature by the protocol's bisection of g(beta) = mean_i (E_p[z_i] - z_i,y_i). Sums are
// compensated (Neumaier), so that a mean over 100,000 rows keeps its last digits.
//
// A pool is {n, k, z: Float64Array(n * k) row-major, y: Int32Array(n)}.

export const N_BINS = 10;

/** A compensated running sum. */
export class Sum {
  constructor() {
    this.s = 0;
    this.c = 0;
  }

  add(x) {
    const t = this.s + x;
    this.c += Math.abs(this.s) >= Math.abs(x) ? (this.s - t) + x : (x - t) + this.s;
    this.s = t;
  }

  get value() {
    return this.s + this.c;
  }
}

/** log softmax(beta * z_row) into `out` (length k). */
export function logProbs(z, off, k, beta, out) {
  let top = -Infinity;
  for (let j = 0; j < k; j++) {
    out[j] = z[off + j] * beta;
    if (out[j] > top) top = out[j];
  }
  let e = 0;
  for (let j = 0; j < k; j++) e += out[j] === top ? 1 : Math.exp(out[j] - top); // exp(0) is 1 exactly
  const lse = top + Math.log(e);
  for (let j = 0; j < k; j++) out[j] -= lse;
  return out;
}

/** The first index of the row's maximum. */
export function firstArgmax(z, off, k) {
  let best = 0;
  for (let j = 1; j < k; j++) if (z[off + j] > z[off + best]) best = j;
  return best;
}

/** Mean NLL of the pool at inverse temperature beta. */
export function meanNll(pool, beta) {
  const { n, k, z, y } = pool;
  const lp = new Float64Array(k);
  const total = new Sum();
  for (let i = 0; i < n; i++) total.add(-logProbs(z, i * k, k, beta, lp)[y[i]]);
  return total.value / n;
}

const gradients = new WeakMap();

/** g(beta) = d/dbeta mean NLL = mean_i (E_p[z_i] - z_i,y). */
export function gradient(pool, beta) {
  // The trajectory's check and the refit evaluate g at the same betas: each is computed once.
  if (!gradients.has(pool)) gradients.set(pool, new Map());
  const seen = gradients.get(pool);
  if (!seen.has(beta)) seen.set(beta, gradientAt(pool, beta));
  return seen.get(beta);
}

/** g(beta) in one pass: p = softmax(beta z_i) by exp(beta z - max) / sum (beta > 0). */
function gradientAt(pool, beta) {
  const { n, k, z, y } = pool;
  const e = new Float64Array(k);
  const total = new Sum();
  for (let i = 0; i < n; i++) {
    const off = i * k;
    let hi = -Infinity;
    for (let j = 0; j < k; j++) if (z[off + j] > hi) hi = z[off + j];
    const top = beta * hi;
    let sum = 0;
    let weighted = 0;
    for (let j = 0; j < k; j++) {
      const d = beta * z[off + j] - top;
      const x = d === 0 ? 1 : Math.exp(d); // exp(0) is 1 exactly: half the exps of two classes
      sum += x;
      weighted += x * z[off + j];
    }
    total.add(weighted / sum - z[off + y[i]]);
  }
  return total.value / n;
}

/** Row `off / k`'s log-probabilities at inverse temperature beta into `lp`; its confidence (the
 * largest probability) into out[0] and its Brier sum against `label` into out[1]. */
export function rowScores(z, off, k, beta, label, lp, out) {
  logProbs(z, off, k, beta, lp);
  let top = 0;
  let b = 0;
  for (let j = 0; j < k; j++) {
    const p = Math.exp(lp[j]);
    if (p > top) top = p;
    const d = p - (j === label ? 1 : 0);
    b += d * d;
  }
  out[0] = top;
  out[1] = b;
}

/** The metrics.json `M` object of the pool at inverse temperature beta (FORMAT.md). Integer
 * fields are marked in `ints` (their dotted paths), since JSON alone does not tell 3 from 3.0. */
export function metricSet(pool, beta, threshold) {
  const { n, k, z, y } = pool;
  const lp = new Float64Array(k);
  const scores = new Float64Array(2);
  const conf = new Float64Array(n);
  const correct = new Uint8Array(n);
  const nll = new Sum();
  const brier = new Sum();
  const confSum = new Sum();
  let nCorrect = 0;
  for (let i = 0; i < n; i++) {
    const off = i * k;
    rowScores(z, off, k, beta, y[i], lp, scores);
    const top = scores[0];
    const b = scores[1];
    conf[i] = top;
    confSum.add(top);
    nll.add(-lp[y[i]]);
    brier.add(b);
    correct[i] = firstArgmax(z, off, k) === y[i] ? 1 : 0;
    nCorrect += correct[i];
  }
  const bins = [];
  let ece = 0;
  const gaps = [];
  for (let bin = 0; bin < N_BINS; bin++) {
    const lower = bin / N_BINS;
    const upper = (bin + 1) / N_BINS;
    let count = 0;
    let right = 0;
    const c = new Sum();
    for (let i = 0; i < n; i++) {
      const inside = bin === N_BINS - 1 ? conf[i] >= lower && conf[i] <= upper : conf[i] >= lower && conf[i] < upper;
      if (inside) {
        count++;
        right += correct[i];
        c.add(conf[i]);
      }
    }
    if (count) {
      const acc = right / count;
      const mean = c.value / count;
      const gap = Math.abs(acc - mean);
      ece += (count / n) * gap;
      gaps.push(gap);
      bins.push({ lower, upper, count, accuracy: acc, mean_confidence: mean });
    } else bins.push({ lower, upper, count: 0, accuracy: null, mean_confidence: null });
  }
  let accepted = 0;
  let wrong = 0;
  for (let i = 0; i < n; i++) {
    if (conf[i] >= threshold) {
      accepted++;
      wrong += 1 - correct[i];
    }
  }
  return {
    n, correct: nCorrect, accuracy: nCorrect / n, mean_confidence: confSum.value / n, nll: nll.value / n,
    brier: brier.value / n, ece, mce: gaps.length ? Math.max(...gaps) : 0, bins,
    threshold: { value: threshold, accepted, wrong_accepted: wrong },
  };
}

/** The integer fields of a metric set, as paths: JSON alone does not tell 3 from 3.0. */
export const INTEGER_FIELDS = new Set(['n', 'correct', 'count', 'accepted', 'wrong_accepted']);

/** The protocol's fit: bisection of g on [1/t_max, 1/t_min] for `steps` halvings; a boundary when
 * g does not change sign ({temperature, beta, boundarySide}). */
export function bisect(pool, tMin, tMax, steps) {
  let lo = 1 / tMax;
  let hi = 1 / tMin;
  if (gradient(pool, lo) >= 0) return { beta: lo, temperature: 1 / lo, boundarySide: 't_max' };
  if (gradient(pool, hi) <= 0) return { beta: hi, temperature: 1 / hi, boundarySide: 't_min' };
  for (let s = 0; s < steps; s++) {
    const mid = (lo + hi) / 2;
    if (mid <= lo || mid >= hi) break; // the bracket cannot be halved any further
    if (gradient(pool, mid) > 0) hi = mid;
    else lo = mid;
  }
  const beta = (lo + hi) / 2;
  return { beta, temperature: 1 / beta, boundarySide: null };
}
