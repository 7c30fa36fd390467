// metrics.json `per_class` and the per-class warnings, derived from the logits by the rule of
// bundle/FORMAT.md "metrics.json": the confusion counts of the first argmax of the raw logits; the
// recorded best relabelling is checked, not searched for (a permutation making exactly the rows
// right it says, with a dual certificate of the assignment problem proving no permutation makes
// more). A bundle that records no per_class gets every permutation tried for K <= 7, and a greedy
// one (largest cells first) above, so that a relabelling that large cannot go unshown.

import { Failed } from './bag.js';
import { firstArgmax } from './numerics.js';

export const EXHAUSTIVE_K = 7;
const RECALL_BELOW = 0.1;
const RECALL_SUPPORT = 10;
const GAIN_FRACTION = 0.05;
const GAIN_ROWS = 5;
const NAMED = 20;

/** Python's format(x, '.1%'). x * 100 in float64 as Python does; no tie can occur at one decimal. */
export const pct = (x) => `${(x * 100).toFixed(1)}%`;

/** C[label][predicted] (K x K integers) of a pool {n, k, z, y}. */
export function counts(pool) {
  const { n, k, z, y } = pool;
  const c = Array.from({ length: k }, () => new Array(k).fill(0));
  for (let i = 0; i < n; i++) c[y[i]][firstArgmax(z, i * k, k)]++;
  return c;
}

const trace = (c) => c.reduce((s, row, j) => s + row[j], 0);

/** Every field of a per_class record but best_permutation, from the confusion counts. */
export function expectedRecord(c) {
  const k = c.length;
  const support = c.map((row) => row.reduce((a, b) => a + b, 0));
  const predicted = c[0].map((_, j) => c.reduce((s, row) => s + row[j], 0));
  const correct = c.map((row, j) => row[j]);
  const confusion = [];
  for (let a = 0; a < k; a++) for (let b = 0; b < k; b++) if (c[a][b]) confusion.push([a, b, c[a][b]]);
  return {
    support, predicted, correct,
    recall: correct.map((r, j) => (support[j] ? r / support[j] : null)),
    precision: correct.map((r, j) => (predicted[j] ? r / predicted[j] : null)),
    confusion,
  };
}

const isInt = (v) => Number.isInteger(v);

/** The rows the recorded best permutation makes right, once its certificate proves no permutation
 * makes more; Failed otherwise. */
export function checkPermutation(c, best) {
  const k = c.length;
  const map = best.map;
  if (!Array.isArray(map) || map.length !== k || !map.every(isInt) || [...map].sort((a, b) => a - b).some((v, i) => v !== i)) {
    throw new Failed(`per_class best_permutation.map is not a permutation of the ${k} labels.`);
  }
  let right = 0;
  for (let i = 0; i < k; i++) right += c[map[i]][i];
  if (best.correct !== right) throw new Failed(`per_class best_permutation makes ${right} rows right, not the ${best.correct} it records.`);
  const { rows, columns } = best.certificate;
  if (rows.length !== k || columns.length !== k) throw new Failed(`per_class best_permutation.certificate needs ${k} row and ${k} column potentials.`);
  // gains[i][j] = c[j][i]: rows predicted i whose label is j. Potentials are JSON integers (schema).
  let feasible = true;
  for (let i = 0; i < k && feasible; i++) for (let j = 0; j < k; j++) if (rows[i] + columns[j] < c[j][i]) { feasible = false; break; }
  const total = rows.reduce((a, b) => a + b, 0) + columns.reduce((a, b) => a + b, 0);
  if (!feasible || total !== right) throw new Failed('per_class best_permutation.certificate does not prove that no permutation of the label map makes more rows right.');
  return right;
}

/** The permutation making the most rows right, every one tried (Heap's order is irrelevant: the
 * first strictly better one in lexicographic order wins, as itertools.permutations enumerates). */
export function exhaustiveBest(c) {
  const k = c.length;
  let bestMap = [...Array(k).keys()];
  let best = trace(c);
  const perm = [];
  const used = new Array(k).fill(false);
  const walk = (depth, right) => {
    if (depth === k) {
      if (right > best) [bestMap, best] = [[...perm], right];
      return;
    }
    for (let v = 0; v < k; v++) {
      if (used[v]) continue;
      used[v] = true;
      perm.push(v);
      walk(depth + 1, right + c[v][depth]);
      perm.pop();
      used[v] = false;
    }
  };
  walk(0, 0);
  return [bestMap, best];
}

/** Predicted class i read as the label of the largest cell left in its column, largest first (ties
 * in row-major order); unmatched classes keep the free labels in order. */
export function greedyPermutation(c) {
  const k = c.length;
  const cells = [];
  for (let a = 0; a < k; a++) for (let b = 0; b < k; b++) cells.push([c[a][b], a * k + b]);
  cells.sort((x, y) => y[0] - x[0] || x[1] - y[1]);
  const map = new Array(k).fill(-1);
  const used = new Set();
  for (const [count, flat] of cells) {
    if (count === 0) break;
    const label = Math.floor(flat / k);
    const predicted = flat % k;
    if (map[predicted] < 0 && !used.has(label)) {
      map[predicted] = label;
      used.add(label);
    }
  }
  const free = [...Array(k).keys()].filter((j) => !used.has(j));
  return map.map((m) => (m >= 0 ? m : free.shift()));
}

/** The warnings of the format's rule for an audit pool with counts c and a best permutation. */
export function classWarnings(c, map, best) {
  const out = [];
  const n = c.reduce((s, row) => s + row.reduce((a, b) => a + b, 0), 0);
  c.forEach((row, j) => {
    const support = row.reduce((a, b) => a + b, 0);
    if (support >= RECALL_SUPPORT && row[j] / support < RECALL_BELOW) {
      out.push(`label ${j} is almost never predicted right: recall ${pct(row[j] / support)} over its ${support} audit rows (the rule: recall below 10% with at least 10 rows)`);
    }
  });
  const recorded = trace(c);
  if (n && best - recorded >= GAIN_ROWS && (best - recorded) / n >= GAIN_FRACTION) {
    const moved = map.map((j, i) => [i, j]).filter(([i, j]) => i !== j).map(([i, j]) => `${i} -> ${j}`);
    const tail = moved.length > NAMED ? ` and ${moved.length - NAMED} more` : '';
    out.push(`reading each predicted label through the permutation ${moved.slice(0, NAMED).join(', ')}${tail} (predicted -> read as) would make audit accuracy ${pct(best / n)} instead of ${pct(recorded / n)}: the label map is probably wrong`);
  }
  return out;
}

/** The per-class warnings the audit counts call for, and how the best permutation was found. */
export function expectedClassWarnings(c, metrics) {
  if (metrics.per_class) {
    const best = metrics.per_class.audit.best_permutation;
    return [classWarnings(c, best.map, checkPermutation(c, best)), 'certified'];
  }
  if (c.length <= EXHAUSTIVE_K) {
    const [map, right] = exhaustiveBest(c);
    return [classWarnings(c, map, right), 'every permutation tried'];
  }
  const map = greedyPermutation(c);
  let right = 0;
  for (let i = 0; i < c.length; i++) right += c[map[i]][i];
  return [classWarnings(c, map, right), 'a greedy permutation tried'];
}
