// What an equivalent reproduction can move (bundle/FORMAT.md "What equivalent can move"), derived
// from the logits: every logit within tau of the stored one, the temperature refitted.
//
// 1. The refit's range: g(beta) of such logits is within eps(beta) = tau (2 + beta mean_i s_i) +
//    1e-12 of g(beta), s_i = min(e^(beta tau) sd_p(z_i), R_i / 2), and g is non-decreasing, so a
//    beta with g - eps > 0 bounds the refit from above and one with g + eps < 0 from below; each
//    found by halving from the published beta, widened by the bisection's final bracket.
// 2. Per row, the corner perturbations (the label, or the top class, pushed one way and every other
//    logit the other) evaluated on the logits themselves, at half-width a_i (tau raw; beta_high tau
//    + dbeta R_i / 2 calibrated).
// 3. Each figure's worst case from those rows, capped at its range.
//
// Sums are compensated; a pool is {n, k, z: Float64Array, y: Int32Array}.

import { N_BINS, Sum, firstArgmax } from './numerics.js';

/** log softmax of row `row` (length k) into out. */
function logSoftmax(row, k, out) {
  let top = -Infinity;
  for (let j = 0; j < k; j++) if (row[j] > top) top = row[j];
  let e = 0;
  for (let j = 0; j < k; j++) e += row[j] === top ? 1 : Math.exp(row[j] - top); // exp(0) is 1 exactly
  const lse = top + Math.log(e);
  for (let j = 0; j < k; j++) out[j] = row[j] - lse;
  return out;
}

const extremes = new WeakMap();

/** Each row's largest and smallest logit, and its label's (computed once per pool). */
function rowExtremes(pool) {
  if (!extremes.has(pool)) {
    const { n, k, z, y } = pool;
    const hi = new Float64Array(n);
    const lo = new Float64Array(n);
    const zy = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const off = i * k;
      let h = -Infinity;
      let l = Infinity;
      for (let j = 0; j < k; j++) {
        const v = z[off + j];
        if (v > h) h = v;
        if (v < l) l = v;
      }
      hi[i] = h;
      lo[i] = l;
      zy[i] = z[off + y[i]];
    }
    extremes.set(pool, { hi, lo, zy });
  }
  return extremes.get(pool);
}

const BLOCK = 1024;

/** [g(beta), eps(beta)] in one pass over the pool: p = softmax(beta z_i) through the offsets from
 * the row's maximum (exp(0) = 1 not computed); plain sums over blocks of rows, compensated across
 * blocks, so that the mean keeps its last digits at a fraction of the cost. */
function gradientAndSlack(pool, beta, tau) {
  const { n, k, z } = pool;
  const { hi, lo, zy } = rowExtremes(pool);
  const e = new Float64Array(k);
  const g = new Sum();
  const total = new Sum();
  const grow = Math.exp(beta * tau);
  for (let start = 0; start < n; start += BLOCK) {
    const stop = Math.min(n, start + BLOCK);
    let gBlock = 0;
    let sBlock = 0;
    for (let i = start; i < stop; i++) {
      const off = i * k;
      const top = hi[i];
      let sum = 0;
      let weighted = 0;
      for (let j = 0; j < k; j++) {
        const d = z[off + j] - top;
        const x = d === 0 ? 1 : Math.exp(beta * d); // exp(0) is 1 exactly: half the exps of two classes
        e[j] = x;
        sum += x;
        weighted += x * d;
      }
      const shift = weighted / sum; // E_p[z] - max z
      let v = 0;
      for (let j = 0; j < k; j++) {
        const d = z[off + j] - top - shift;
        v += e[j] * d * d;
      }
      gBlock += top + shift - zy[i];
      sBlock += Math.min(grow * Math.sqrt(v / sum), (top - lo[i]) / 2);
    }
    g.add(gBlock);
    total.add(sBlock);
  }
  return [g.value / n, tau * (2 + (beta * total.value) / n) + 1e-12];
}

/** A point between start (rule false) and end (rule true) where the rule holds, as near start as halving finds. */
function firstExcluded(rule, start, end) {
  for (;;) {
    const mid = 0.5 * (start + end);
    if (!(Math.min(start, end) < mid && mid < Math.max(start, end))) return end;
    if (rule(mid)) end = mid;
    else start = mid;
  }
}

/** [beta_low, beta_high]: the betas a refit on logits within tau of the calibration pool can reach. */
export function temperatureRange(cal, tau, beta, fit) {
  const bMin = 1 / fit.t_max;
  const bMax = 1 / fit.t_min;
  const width = (bMax - bMin) / 2 ** fit.steps;
  const seen = new Map();
  const at = (b) => {
    if (!seen.has(b)) seen.set(b, gradientAndSlack(cal, b, tau));
    return seen.get(b);
  };
  const over = (b) => at(b)[0] - at(b)[1] > 0;
  const under = (b) => at(b)[0] + at(b)[1] < 0;
  const high = !over(beta) && over(bMax) ? firstExcluded(over, beta, bMax) : bMax;
  const low = !under(beta) && under(bMin) ? firstExcluded(under, beta, bMin) : bMin;
  return [Math.max(bMin, low - width), Math.min(bMax, high + width)];
}

/** The protocol's bin of a confidence (explicit comparisons with b/10; 1.0 in the last), -1 outside [0, 1]. */
function binOf(c) {
  let out = -1;
  for (let b = 0; b < N_BINS; b++) {
    const lower = b / N_BINS;
    const upper = (b + 1) / N_BINS;
    if (b === N_BINS - 1 ? c >= lower && c <= upper : c >= lower && c < upper) out = b;
  }
  return out;
}

/** Each figure's worst-case |change| for one pool at inverse temperature beta, half-widths a(i). */
export function figureBounds(pool, beta, a, tau, mce) {
  const { n, k, z, y } = pool;
  const s = new Float64Array(k);
  const t = new Float64Array(k);
  const base = new Float64Array(k);
  const lp = new Float64Array(k);
  const reach = new Float64Array(n);
  const gap = new Float64Array(n); // right - conf
  const loBin = new Int8Array(n);
  const hiBin = new Int8Array(n);
  const moving = new Uint8Array(n);
  const nll = new Sum();
  const brier = new Sum();
  const reachSum = new Sum();
  const ece = new Sum();
  let flipsCount = 0;
  let edges = 0;
  // log-probability of column `at` after the corner: +sign a there, -sign a elsewhere
  const corner = (ai, at, sign) => {
    for (let j = 0; j < k; j++) t[j] = s[j] + (j === at ? sign * ai : -sign * ai);
    return logSoftmax(t, k, lp)[at];
  };
  for (let i = 0; i < n; i++) {
    const off = i * k;
    const ai = a(i);
    for (let j = 0; j < k; j++) s[j] = beta * z[off + j];
    logSoftmax(s, k, base);
    const top = firstArgmax(z, off, k);
    const label = y[i];
    const down = corner(ai, label, -1);
    const up = corner(ai, label, 1);
    nll.add(Math.max(base[label] - down, up - base[label]));
    const conf = Math.exp(base[top]);
    const cLo = Math.exp(corner(ai, top, -1));
    const cHi = Math.exp(corner(ai, top, 1));
    const factor = Math.exp(Math.min(2 * ai, 700)) - 1;
    const shrink = 1 + Math.exp(-2 * ai);
    let b = 0;
    for (let j = 0; j < k; j++) {
      const p = Math.exp(base[j]);
      b += p * (j === label ? 2 - p * shrink : p * (2 + factor));
    }
    const rowBrier = factor * b;
    brier.add(Number.isNaN(rowBrier) ? Infinity : rowBrier);
    // the two largest raw logits: a row flips when another is within 2 tau of the top
    let first = -Infinity;
    let second = -Infinity;
    for (let j = 0; j < k; j++) {
      const v = z[off + j];
      if (v > first) [first, second] = [v, first];
      else if (v > second) second = v;
    }
    const flips = first - second <= 2 * tau;
    reach[i] = Math.max(cHi - conf, conf - cLo);
    reachSum.add(reach[i]);
    loBin[i] = binOf(cLo);
    hiBin[i] = binOf(cHi);
    const edge = loBin[i] !== hiBin[i];
    moving[i] = edge || flips ? 1 : 0;
    const right = top === label ? 1 : 0;
    gap[i] = right - conf;
    if (moving[i]) {
      const after = flips ? Math.max(cHi, 1 - cLo) : Math.max(Math.abs(right - cLo), Math.abs(right - cHi));
      ece.add(Math.abs(right - conf) + after);
    } else ece.add(reach[i]);
    flipsCount += flips ? 1 : 0;
    edges += edge ? 1 : 0;
  }
  let hiGap = 0;
  let loGap = 0;
  for (let bin = 0; bin < N_BINS; bin++) {
    const g = new Sum();
    const d = new Sum();
    let size = 0;
    let m = 0;
    for (let i = 0; i < n; i++) {
      if (moving[i]) {
        if (loBin[i] <= bin && bin <= hiBin[i]) m++;
      } else if (loBin[i] === bin) {
        size++;
        g.add(gap[i]);
        d.add(reach[i]);
      }
    }
    if (size === 0 && m === 0) continue;
    const gv = Math.abs(g.value);
    const dv = d.value;
    let candidate = (gv + dv + m) / (size + m);
    if (size) candidate = Math.max(candidate, (gv + dv) / size);
    hiGap = Math.max(hiGap, Math.min(1, candidate));
    if (size) loGap = Math.max(loGap, Math.max(0, gv - dv - m) / (size + m));
  }
  return {
    accuracy: flipsCount / n, mean_confidence: Math.min(1, reachSum.value / n), nll: nll.value / n,
    brier: Math.min(2, brier.value / n), ece: Math.min(1, ece.value / n), mce: Math.max(hiGap - mce, mce - loGap, 0),
    rows_that_could_flip: flipsCount, rows_near_bin_edge: edges,
  };
}

/** metrics.json reproduction_bounds as the logits give them. tau and source: the protocol's
 * tolerance and where it comes from; published: metrics.json pools (their MCEs). */
export function expectedBounds({ tau, source, beta, fit, tables, published }) {
  const [low, high] = temperatureRange(tables.calibration, tau, beta, fit);
  const moved = Math.max(high - beta, beta - low);
  const pools = {};
  for (const pool of ['calibration', 'audit']) {
    const table = tables[pool];
    const { hi, lo } = rowExtremes(table);
    const half = (i) => (hi[i] - lo[i]) / 2;
    pools[pool] = {
      raw: figureBounds(table, 1, () => tau, tau, published[pool].raw.mce),
      calibrated: figureBounds(table, beta, (i) => high * tau + moved * half(i), tau, published[pool].calibrated.mce),
    };
  }
  return { logit_tolerance: tau, source, temperature: { beta_low: low, beta_high: high, t_low: 1 / high, t_high: 1 / low }, pools };
}
