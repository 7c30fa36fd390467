// The protocol's pre-registered calibration estimators (FORMAT.md, metrics.json `estimators`;
// docs/GUIDE.md, "The estimators"), recomputed from the audit pool's logits in float64, raw
// (beta = 1) and calibrated (the fitted beta). Written from the definitions:
//
// - binned: top-label confidence (correct = first argmax is the label) or each class's column
//   (outcome = the label is that class, the K errors averaged in the norm's power); equal-width
//   upper edges b/B, or equal-mass ones: the sorted sample cut into min(B, n) runs of n / runs
//   rows (the first n mod runs one longer), each inner edge the midpoint of the values either side
//   of a cut, duplicates merged, 1 last; a value sits in the first bin whose upper edge is >= it;
//   the error sum_b (n_b / n) |mean p_b - mean y_b|^q, to the power 1/q; debiased (Kumar et al.,
//   l2 only): each bin of at least two rows less mean y_b (1 - mean y_b) / (n_b - 1), the square
//   root of the total clipped at 0, undefined when no bin holds two rows;
// - ks: the largest absolute partial sum of (correct - confidence) over the rows in increasing
//   confidence, rows of equal confidence taken together, divided by n;
// - smooth-ece: relplot's smoothed ECE (Blasiok and Nakkiran): the rows spread linearly onto a grid
//   of g points, smoothed by a Gaussian of width sigma reflected at 0 and 1, read at the mesh,
//   and the bandwidth found by relplot's search (the smallest sigma on the halving bracket with
//   smECE(sigma) <= sigma, `refine` halvings, from 1);
// - bin-intervals: Clopper-Pearson bounds of each of the ten reliability bins (beta.js).
//
// The paired-bootstrap intervals take the resamples' index rows as an argument: each row holds the
// audit positions drawn for one resample (numpy's PCG64 stream; FORMAT.md "bootstrap"). Without
// them, the point values alone are recomputed and the intervals are left unchecked.

import { clopperPearson } from './beta.js';
import { firstArgmax, N_BINS } from './numerics.js';
import { feedResamples } from './resamples.js';

export const UNDEFINED = 'no bin holds two rows, so the debiased estimate is undefined';
export const NEEDS = {
  binned: ['binning', 'bins', 'norm', 'debias'], ks: [], 'smooth-ece': ['bandwidth', 'eps', 'refine', 'mesh'],
  'bin-intervals': ['method', 'level'],
};

/** softmax(beta z) of every row, as the Python verifier computes it (max subtracted, exp(0) = 1). */
export function probabilities(pool, beta) {
  const { n, k, z } = pool;
  const p = new Float64Array(n * k);
  const s = new Float64Array(k);
  for (let i = 0; i < n; i++) {
    const off = i * k;
    let top = -Infinity;
    for (let j = 0; j < k; j++) {
      s[j] = z[off + j] * beta;
      if (s[j] > top) top = s[j];
    }
    let e = 0;
    for (let j = 0; j < k; j++) e += s[j] === top ? 1 : Math.exp(s[j] - top);
    const lse = top + Math.log(e);
    for (let j = 0; j < k; j++) p[off + j] = Math.exp(s[j] - lse);
  }
  return p;
}

/** The view of one scale: probabilities, first argmax, top-label confidence and correctness. */
export function scale(pool, beta) {
  const { n, k, z, y } = pool;
  const p = probabilities(pool, beta);
  const pred = new Int32Array(n);
  const conf = new Float64Array(n);
  const correct = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    pred[i] = firstArgmax(z, i * k, k);
    conf[i] = p[i * k + pred[i]];
    correct[i] = pred[i] === y[i] ? 1 : 0;
  }
  return { n, k, p, y, pred, conf, correct };
}

/** Indices 0..n-1 sorted by value (ties by index: a stable order). */
function order(values) {
  const idx = new Int32Array(values.length);
  for (let i = 0; i < idx.length; i++) idx[i] = i;
  return idx.sort((a, b) => values[a] - values[b] || a - b);
}

// ---- binned ----------------------------------------------------------------------------------

/** The upper bin edges of `values` (increasing, distinct, the last 1). */
export function upperEdges(values, entry) {
  const bins = Number(entry.bins);
  if (entry.binning === 'equal-width') return Float64Array.from({ length: bins }, (_, b) => (b + 1) / bins);
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  const runs = Math.min(bins, n);
  const size = Math.floor(n / runs);
  const extra = n % runs;
  const edges = [];
  for (let i = 0; i < runs - 1; i++) {
    const end = (i + 1) * size + Math.min(i + 1, extra); // first index of run i + 1
    edges.push((sorted[end - 1] + sorted[end]) / 2);
  }
  edges.push(1);
  edges.sort((a, b) => a - b);
  return Float64Array.from(edges.filter((e, i) => i === 0 || e !== edges[i - 1]));
}

/** The plug-in (or debiased) error of `values` against 0/1 `outcomes` in the bins of `edges`;
 * null when debiased and no bin holds two rows. */
export function calibrationError(values, outcomes, edges, norm, debias) {
  const m = edges.length + 1;
  const count = new Float64Array(m);
  const sumP = new Float64Array(m);
  const sumY = new Float64Array(m);
  for (let i = 0; i < values.length; i++) {
    const b = lowerBound(edges, values[i]); // the first bin whose upper edge is >= the value
    count[b] += 1;
    sumP[b] += values[i];
    sumY[b] += outcomes[i];
  }
  return errorOfSums({ count, sumP, sumY, total: values.length }, norm, debias);
}

/** A binned estimator of one scale, top-label or classwise; null when undefined. */
export function binned(entry, s) {
  if ((entry.confidence || 'top-label') === 'top-label') {
    return calibrationError(s.conf, s.correct, upperEdges(s.conf, entry), entry.norm, entry.debias);
  }
  const power = entry.norm === 'l1' ? 1 : 2;
  let total = 0;
  const column = new Float64Array(s.n);
  const outcome = new Float64Array(s.n);
  for (let c = 0; c < s.k; c++) {
    for (let i = 0; i < s.n; i++) {
      column[i] = s.p[i * s.k + c];
      outcome[i] = s.y[i] === c ? 1 : 0;
    }
    const err = calibrationError(column, outcome, upperEdges(column, entry), entry.norm, entry.debias);
    if (err === null) return null;
    total += err ** power;
  }
  return (total / s.k) ** (1 / power);
}

// ---- KS --------------------------------------------------------------------------------------

/** The KS calibration error of top-label confidences `conf` and 0/1 `correct`. */
export function ks(conf, correct) {
  const idx = order(conf);
  let run = 0;
  let worst = 0;
  for (let r = 0; r < idx.length;) {
    const v = conf[idx[r]];
    let group = 0;
    for (; r < idx.length && conf[idx[r]] === v; r++) group += correct[idx[r]] - conf[idx[r]];
    run += group;
    if (Math.abs(run) > worst) worst = Math.abs(run);
  }
  return worst / conf.length;
}

// ---- smooth ECE ------------------------------------------------------------------------------

/** Python's round(): to the nearest integer, ties to even. */
function roundHalfEven(x) {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** smECE at bandwidth sigma: the residual (conf - correct) and the density spread onto the grid,
 * smoothed by the reflected Gaussian at the grid points the mesh reads, interpolated there. */
export function smoothEceAt(conf, correct, sigma, mesh) {
  const g = Math.floor(Math.max(2000, roundHalfEven(20 / sigma)) / 2) + 1;
  const last = g - 1;
  const half = Math.floor(last / 2);
  const residual = new Float64Array(g);
  const mass = new Float64Array(g);
  for (let i = 0; i < conf.length; i++) {
    const at = conf[i] * last;
    const cell = Math.min(Math.max(Math.floor(at), 0), g - 2);
    const frac = at - cell;
    const r = conf[i] - correct[i];
    residual[cell] += (1 - frac) * r;
    residual[cell + 1] += frac * r;
    mass[cell] += 1 - frac;
    mass[cell + 1] += frac;
  }
  const occupied = [];
  for (let j = 0; j < g; j++) if (residual[j] !== 0 || mass[j] !== 0) occupied.push(j);
  // The kernel by integer distance d (0..half), zero where the exponential underflows: adding the
  // zero terms would change no sum.
  const norm = Math.sqrt(2 * Math.PI) * sigma;
  const kernel = new Float64Array(half + 1);
  let reach = half;
  for (let d = 0; d <= half; d++) {
    kernel[d] = Math.exp(-((d / last) ** 2) / (2 * sigma * sigma)) / norm;
    if (kernel[d] === 0) {
      reach = d - 1;
      break;
    }
  }
  const points = Math.max(roundHalfEven(10 / sigma), mesh);
  const step = 1 / (points - 1);
  const smoothR = new Float64Array(g);
  const smoothM = new Float64Array(g);
  const done = new Uint8Array(g);
  const occ = Int32Array.from(occupied);
  const smoothAt = (i) => {
    if (done[i]) return;
    done[i] = 1;
    let r = 0;
    let m = 0;
    // Each occupied point j, its mirror -j at 0 (j >= 1) and 4h - j at 1 (j <= 2h - 1), within half.
    const from = lowerBound(occ, i - reach);
    for (let t = from; t < occ.length && occ[t] <= i + reach; t++) {
      const j = occ[t];
      const w = kernel[Math.abs(i - j)];
      r += w * residual[j];
      m += w * mass[j];
    }
    for (let t = 0; t < occ.length && occ[t] <= reach - i; t++) {
      const j = occ[t];
      if (j < 1) continue;
      const w = kernel[i + j];
      r += w * residual[j];
      m += w * mass[j];
    }
    for (let t = lowerBound(occ, 4 * half - i - reach); t < occ.length; t++) {
      const j = occ[t];
      if (j > 2 * half - 1) break;
      const d = Math.abs(i - (4 * half - j));
      if (d > reach) continue;
      const w = kernel[d];
      r += w * residual[j];
      m += w * mass[j];
    }
    smoothR[i] = r;
    smoothM[i] = m;
  };
  let total = 0;
  let totalDensity = 0;
  for (let q = 0; q < points; q++) {
    const x = q === points - 1 ? 1 : q * step;
    const at = Math.min(Math.max(Math.floor(x * last), 0), g - 2);
    smoothAt(at);
    smoothAt(at + 1);
    const f = x * last - at;
    const res = smoothR[at] * (1 - f) + smoothR[at + 1] * f;
    const density = smoothM[at] * (1 - f) + smoothM[at + 1] * f + 0.0001;
    total += Math.abs(res / density) * density;
    totalDensity += density;
  }
  return total / totalDensity;
}

/** The first position t with sorted[t] >= v (sorted.length when v is above the last). */
function lowerBound(sorted, v) {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] >= v) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** smECE and its bandwidth: a fixed one, or relplot's search (1 + `refine` evaluations at most). */
export function smoothEce(entry, conf, correct) {
  const mesh = Number(entry.mesh);
  if (entry.bandwidth !== 'fixed-point') {
    const sigma = Number(entry.bandwidth);
    return { value: smoothEceAt(conf, correct, sigma, mesh), sigma };
  }
  const narrow = (s) => s < entry.eps || s < smoothEceAt(conf, correct, s, mesh);
  let sigma = 1;
  let below = 0;
  if (!narrow(sigma)) {
    for (let r = 0; r < Number(entry.refine); r++) {
      const mid = (sigma + below) / 2;
      if (narrow(mid)) below = mid;
      else sigma = mid;
    }
  }
  return { value: smoothEceAt(conf, correct, sigma, mesh), sigma };
}

// ---- Clopper-Pearson -------------------------------------------------------------------------

/** The ten reliability bins (k/10 edges, 1.0 in the last) with their Clopper-Pearson bounds. */
export function binIntervals(conf, correct, level) {
  const count = new Array(N_BINS).fill(0);
  const hits = new Array(N_BINS).fill(0);
  for (let i = 0; i < conf.length; i++) {
    for (let b = 0; b < N_BINS; b++) {
      const lower = b / N_BINS;
      const upper = (b + 1) / N_BINS;
      if (b === N_BINS - 1 ? conf[i] >= lower && conf[i] <= upper : conf[i] >= lower && conf[i] < upper) {
        count[b]++;
        hits[b] += correct[i];
        break;
      }
    }
  }
  return count.map((c, b) => {
    if (!c) return { count: 0, correct: 0, lower: null, upper: null, reason: 'empty bin' };
    const [lower, upper] = clopperPearson(hits[b], c, level);
    return { count: c, correct: hits[b], lower, upper };
  });
}

// ---- the record ------------------------------------------------------------------------------

/** One scalar estimator on all of one scale's rows. */
export function score(entry, s) {
  if (entry.kind === 'binned') return binned(entry, s);
  if (entry.kind === 'ks') return ks(s.conf, s.correct);
  return smoothEce(entry, s.conf, s.correct).value;
}

/**
 * The scalar estimators of one scale on resamples of its rows, each resample given as how often
 * each row was drawn (draws) and the drawn rows in draw order (rows). Every column is sorted once;
 * a resample is a weight per sorted row, so no drawn copy of the probabilities is made. A binned
 * estimator's equal-mass cuts fall at sample positions of the drawn sample (found on the cumulative
 * weights); KS sums the weights per distinct confidence; smooth ECE scores the drawn rows
 * themselves (its bandwidth search compares floats computed over them in draw order).
 */
export class Resampler {
  /** `twin`: the other scale's Resampler, scored first on each resample: each column's weights are
   * gathered from the twin's column in sorted order (through a map from this order to the twin's),
   * which reads almost in sequence where the two orders nearly agree (the top-label column of two
   * classes, whatever beta), where gathering from the draws reads at random. */
  constructor(s, twin = null) {
    this.s = s;
    this.twin = twin;
    this.sorted = new Map();
    this.version = 0; // bumped by next(): the draws array is reused from one resample to the next
    this.drawsSeen = null;
  }

  /** Say that the draws array now holds the next resample. */
  next() {
    this.version++;
  }

  /** Column c sorted by value: the top-label column (c = -1) or class c ({values, outcomes, order,
   * last: 1 where the next value differs}, with its weight buffers and bin sums, reused from one
   * resample to the next). */
  column(c) {
    if (!this.sorted.has(c)) {
      const { n, k, p, y, conf, correct } = this.s;
      const raw = c < 0 ? conf : Float64Array.from({ length: n }, (_, i) => p[i * k + c]);
      const idx = order(raw);
      const values = new Float64Array(n);
      const outcomes = new Float64Array(n);
      const last = new Uint8Array(n);
      for (let r = 0; r < n; r++) {
        values[r] = raw[idx[r]];
        outcomes[r] = c < 0 ? correct[idx[r]] : (y[idx[r]] === c ? 1 : 0);
      }
      for (let r = 0; r < n; r++) last[r] = r === n - 1 || values[r + 1] !== values[r] ? 1 : 0;
      let map = null;
      if (this.twin) {
        const at = new Int32Array(n); // the twin's sorted position of each row
        const theirs = this.twin.column(c).order;
        for (let r = 0; r < n; r++) at[theirs[r]] = r;
        map = new Int32Array(n);
        for (let r = 0; r < n; r++) map[r] = at[idx[r]];
      }
      this.sorted.set(c, {
        values, outcomes, order: idx, last, map,
        w: new Float64Array(n), cumulative: new Float64Array(n), total: 0, version: -1, sums: new Map(),
      });
    }
    return this.sorted.get(c);
  }

  /** Column c's weights in sorted order under `draws`, their total and running sums (the column
   * object, its w, cumulative and total filled); computed once per resample and column (the
   * estimators of one resample share them). */
  weights(c, draws) {
    if (this.drawsSeen !== draws) {
      this.drawsSeen = draws;
      this.version++;
    }
    const col = this.column(c);
    if (col.version !== this.version) {
      // KS's partial sums come along in the same pass (its column is the top-label one).
      col.total = col.map === null ? gatherWeights(draws, col.order, col, c < 0 ? KS_OUT : null)
        : gatherWeights(this.twin.weights(c, draws).w, col.map, col, c < 0 ? KS_OUT : null);
      col.ks = c < 0 ? KS_OUT[0] : NaN;
      col.version = this.version;
    }
    return col;
  }

  /** A binned estimator's error on column c under draws (null when undefined). The bins' sums
   * are computed once per resample, column and binning (the estimators differ in the norm only). */
  binnedColumn(entry, c, draws) {
    const col = this.weights(c, draws);
    const key = `${entry.binning} ${entry.bins}`;
    let sums = col.sums.get(key);
    if (sums === undefined || sums.version !== this.version) {
      sums = this.binSums(entry, col);
      sums.version = this.version;
      col.sums.set(key, sums);
    }
    return errorOfSums(sums, entry.norm, entry.debias);
  }

  /** The per-bin weighted counts and sums of a weighted column's binning. */
  binSums(entry, col) {
    const { values, outcomes, w, total, cumulative } = col;
    const n = values.length;
    let edges;
    if (entry.binning === 'equal-width') edges = upperEdges(values, entry);
    else {
      const bins = Number(entry.bins);
      const runs = Math.min(bins, total);
      const size = Math.floor(total / runs);
      const extra = total % runs;
      // Sample positions e - 1 and e of the drawn sample, as indices into the sorted values: the
      // first index whose cumulative weight exceeds the position.
      const at = (position) => {
        let lo = 0;
        let hi = n;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (cumulative[mid] > position) hi = mid;
          else lo = mid + 1;
        }
        return lo;
      };
      const list = [];
      for (let i = 0; i < runs - 1; i++) {
        const e = (i + 1) * size + Math.min(i + 1, extra);
        list.push((values[at(e - 1)] + values[at(e)]) / 2);
      }
      list.push(1);
      list.sort((a, b) => a - b);
      edges = Float64Array.from(list.filter((e, i) => i === 0 || e !== list[i - 1]));
    }
    const m = edges.length + 1;
    const count = new Float64Array(m);
    const sumP = new Float64Array(m);
    const sumY = new Float64Array(m);
    sumBins(values, outcomes, w, edges, count, sumP, sumY);
    return { count, sumP, sumY, total };
  }

  /** The estimator on the resample drawing row i draws[i] times (`rows`: the drawn rows). */
  score(entry, draws, rows) {
    if (entry.kind === 'ks') return this.weights(-1, draws).ks / rows.length;
    if (entry.kind === 'smooth-ece') {
      const conf = Float64Array.from(rows, (i) => this.s.conf[i]);
      const correct = Float64Array.from(rows, (i) => this.s.correct[i]);
      return smoothEce(entry, conf, correct).value;
    }
    if ((entry.confidence || 'top-label') === 'top-label') return this.binnedColumn(entry, -1, draws);
    const power = entry.norm === 'l1' ? 1 : 2;
    let total = 0;
    for (let c = 0; c < this.s.k; c++) {
      const err = this.binnedColumn(entry, c, draws);
      if (err === null) return null;
      total += err ** power;
    }
    return (total / this.s.k) ** (1 / power);
  }
}

const KS_OUT = new Float64Array(1);

/** w[r] = draws[idx[r]] (idx: the column's order into the draws, or its map into the twin's
 * weights) and its running sums into the column's w and cumulative; returns the total. With `ks` (a Float64Array(1)), also KS's largest absolute partial sum of w x (outcome -
 * value) over the sorted column, rows of equal value taken together, into ks[0]. (Plain
 * functions: V8 optimises each loop whole.) */
function gatherWeights(draws, idx, { w, cumulative, values, outcomes, last }, ks) {
  const n = idx.length;
  let total = 0;
  if (ks === null) {
    for (let r = 0; r < n; r++) {
      const x = draws[idx[r]];
      w[r] = x;
      cumulative[r] = total += x;
    }
    return total;
  }
  let run = 0;
  let worst = 0;
  let group = 0;
  for (let r = 0; r < n; r++) {
    const x = draws[idx[r]];
    w[r] = x;
    cumulative[r] = total += x;
    group += x * (outcomes[r] - values[r]);
    if (last[r]) {
      run += group;
      group = 0;
      if (Math.abs(run) > worst) worst = Math.abs(run);
    }
  }
  ks[0] = worst;
  return total;
}

/** Each sorted value's weight, weight x value and weight x outcome added into its bin (the first
 * whose upper edge is >= the value): the values are sorted, so each bin is one run of rows, summed
 * in locals (a row drawn 0 times adds 0). */
function sumBins(values, outcomes, w, edges, count, sumP, sumY) {
  const n = values.length;
  const last = edges.length;
  let r = 0;
  for (let b = 0; b <= last; b++) {
    const edge = b < last ? edges[b] : Infinity;
    let c = 0;
    let p = 0;
    let y = 0;
    for (; r < n && values[r] <= edge; r++) {
      const x = w[r];
      c += x;
      p += x * values[r];
      y += x * outcomes[r];
    }
    count[b] = c;
    sumP[b] = p;
    sumY[b] = y;
  }
}

/** The plug-in (or debiased) error from per-bin weighted counts and sums; null when debiased
 * and no bin holds two rows. */
function errorOfSums({ count, sumP, sumY, total }, norm, debias) {
  const power = norm === 'l1' ? 1 : 2;
  let weighted = 0;
  let kept = 0;
  for (let b = 0; b < count.length; b++) {
    if (count[b] < (debias ? 2 : 1)) continue;
    kept++;
    const mp = sumP[b] / count[b];
    const my = sumY[b] / count[b];
    let term = Math.abs(mp - my) ** power;
    if (debias) term -= (my * (1 - my)) / (count[b] - 1);
    weighted += count[b] * term;
  }
  if (debias && !kept) return null;
  const mean = weighted / total;
  return debias ? Math.sqrt(Math.max(mean, 0)) : mean ** (1 / power);
}

/** numpy.quantile(values, q, method='linear'). */
export function quantile(sortedValues, q) {
  const h = (sortedValues.length - 1) * q;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, sortedValues.length - 1);
  const t = h - lo;
  const a = sortedValues[lo];
  const d = sortedValues[hi] - a;
  return t >= 0.5 ? sortedValues[hi] - d * (1 - t) : a + d * t;
}

/** The interval at `level` of `values`, or null when any is null (an undefined resample). */
function interval(values, level) {
  if (values.some((v) => v === null)) return null;
  const sorted = Float64Array.from(values).sort();
  return [quantile(sorted, (1 - level) / 2), quantile(sorted, (1 + level) / 2)];
}

/** The protocol's entries, with the first problem the Python verifier names as a sentence. */
export function entryProblem(entries, boot) {
  for (let index = 0; index < entries.length; index++) {
    const entry = entries[index];
    const missing = (NEEDS[entry.kind] || []).filter((name) => !(name in entry));
    if (missing.length) return `the protocol's metrics.estimators[${index}] (${entry.kind}) has no ${missing[0]}.`;
    if (entry.debias && entry.norm !== 'l2') return `the protocol's metrics.estimators[${index}] debiases norm '${entry.norm}'; only l2 has a debiased estimator.`;
    if ('interval' in entry && !boot) return `the protocol's estimator '${entry.id}' asks for a bootstrap interval without a bootstrap section.`;
  }
  return null;
}

/** The estimators' consumer of a resample pass (resamples.js): every entry with an interval scored
 * raw and calibrated on each resample (`drawn`: id -> {raw, calibrated}: the values in resample order). */
export class IntervalScorer {
  constructor(entries, scales) {
    this.entries = entries;
    const raw = new Resampler(scales.raw);
    this.resamplers = { raw, calibrated: new Resampler(scales.calibrated, raw) };
    this.drawn = {};
    for (const e of entries) this.drawn[e.id] = { raw: [], calibrated: [] };
  }

  add(rows, draws) {
    const { resamplers, drawn } = this;
    resamplers.raw.next();
    resamplers.calibrated.next();
    for (const e of this.entries) {
      for (const which of ['raw', 'calibrated']) drawn[e.id][which].push(resamplers[which].score(e, draws, rows));
    }
  }
}

/**
 * metrics.json `estimators` as the protocol and the audit logits make it. `resampleRows`: the
 * bootstrap's resample matrix (a ResampleMatrix, drawn here) or an iterable of its index rows (an
 * array of n audit positions each, in resample order), or null: then each interval field is left
 * out and `intervals` is false. `pause` (optional, awaited) is called about every 50 ms while the
 * resamples are scored, so that the page can paint. `riders`: other consumers of the same rows
 * (resamples.js), fed in the same pass when there is one; one that throws is dropped and never
 * changes this record.
 */
export async function expectedRecord(protocol, audit, beta, resampleRows = null, pause = null, riders = []) {
  const entries = protocol.metrics.estimators;
  const boot = protocol.bootstrap || null;
  const scales = { raw: scale(audit, 1), calibrated: scale(audit, beta) };
  const withInterval = entries.filter((e) => 'interval' in e);
  let drawn = {};
  if (withInterval.length && resampleRows !== null) {
    const scorer = new IntervalScorer(withInterval, scales);
    await feedResamples(resampleRows, audit.n, [scorer], riders, pause);
    drawn = scorer.drawn;
  }
  const results = {};
  for (const entry of entries) {
    const out = { kind: entry.kind };
    for (const which of ['raw', 'calibrated']) {
      const s = scales[which];
      if (entry.kind === 'bin-intervals') out[which] = { bins: binIntervals(s.conf, s.correct, Number(entry.level)) };
      else if (entry.kind === 'smooth-ece') {
        const { value, sigma } = smoothEce(entry, s.conf, s.correct);
        out[which] = { value, bandwidth: sigma };
      } else {
        const value = score(entry, s);
        out[which] = value === null ? { value: null, reason: UNDEFINED } : { value };
      }
    }
    if ('interval' in entry) {
      const point = out.raw.value === null || out.calibrated.value === null ? null : out.calibrated.value - out.raw.value;
      out.difference = { point };
      if (resampleRows !== null) {
        const level = Number(entry.interval.level);
        const d = drawn[entry.id];
        for (const which of ['raw', 'calibrated']) {
          const q = interval(d[which], level);
          out[which].interval = q === null ? null : { lower: q[0], upper: q[1] };
        }
        const diffs = d.raw.map((a, i) => (a === null || d.calibrated[i] === null ? null : d.calibrated[i] - a));
        const q = interval(diffs, level);
        if (q === null || point === null) {
          Object.assign(out.difference, { lower: null, upper: null, verdict: 'no claim', reason: 'a resample left the estimate undefined' });
        } else Object.assign(out.difference, { lower: q[0], upper: q[1], verdict: verdictOf(q[0], q[1]) });
      }
    }
    results[entry.id] = out;
  }
  return {
    record: {
      pool: 'audit', resamples: boot ? Number(boot.resamples) : 0, seed: boot ? Number(boot.seed) : 0,
      statistic: 'calibrated minus raw', results,
    },
    intervals: resampleRows !== null || !withInterval.length,
  };
}

/** 'decrease' when the interval of the change is wholly below 0, 'increase' wholly above, else 'no claim'. */
export function verdictOf(lower, upper) {
  if (upper < 0) return 'decrease';
  if (lower > 0) return 'increase';
  return 'no claim';
}
