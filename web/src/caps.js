// The size cap of every file a bag may hold (bundle/FORMAT.md "Limits"): set by the protocol's
// sizes (rows, classes, bisection steps, pool sizes) when they are within the format's bounds,
// else the fixed caps. A file over its cap is not read: bag.layout fails naming it.

import { Num, parseRaw } from './json.js';

const MiB = 1024 * 1024;
const LIMIT = {
  file: 64 * MiB, total: 256 * MiB, protocol: 1 * MiB, small: 4 * MiB, rows: 100_000, classes: 1000, steps: 1100,
  resamples: 100_000, resampleCells: 200_000_000, stabilitySizes: 64,
  slack: 64 * 1024, poolsPerRow: 256, parquetPerRow: 512, parquetPerCell: 16, trajectoryPerStep: 512,
};
const PROTOCOL = 'data/protocol.json';
const SIZED = ['data/pools.json', 'data/predictions/calibration.parquet', 'data/predictions/audit.parquet', 'data/trajectory.json'];

class OutOfBounds extends Error {}

function int(node, low, high) {
  if (!(node instanceof Num) || !node.integer || node.value < low || node.value > high) throw new OutOfBounds();
  return node.value;
}

const get = (node, ...keys) => keys.reduce((n, k) => {
  if (typeof k === 'number') {
    if (!Array.isArray(n) || k >= n.length) throw new OutOfBounds();
    return n[k];
  }
  if (!(n instanceof Map) || !n.has(k)) throw new OutOfBounds();
  return n.get(k);
}, node);

/** The protocol's sizes ({rows, classes, steps, sizes: pool -> size, resamples: the bootstrap's, null
 * without one}), or null when one is missing, not an integer or beyond the bounds. */
export function dimensions(bytes) {
  try {
    const p = parseRaw(bytes, PROTOCOL);
    const rows = int(get(p, 'resources', 'dataset', 'rows'), 1, LIMIT.rows);
    const labels = get(p, 'resources', 'dataset', 'labels');
    if (!Array.isArray(labels)) throw new OutOfBounds();
    const classes = labels.length;
    if (classes < 2 || classes > LIMIT.classes) throw new OutOfBounds();
    const steps = int(get(p, 'fit', 'steps'), 1, LIMIT.steps);
    const pools = get(p, 'split', 'pools');
    if (!Array.isArray(pools)) throw new OutOfBounds();
    const sizes = new Map(pools.map((e) => [String(get(e, 'name')), int(get(e, 'size'), 0, LIMIT.rows)]));
    let resamples = null;
    if (p.has('bootstrap')) {
      resamples = int(get(p, 'bootstrap', 'resamples'), 1, LIMIT.resamples);
      const pool = p.get('bootstrap') instanceof Map ? p.get('bootstrap').get('pool') : undefined;
      const n = sizes.has(String(pool)) ? sizes.get(String(pool)) : rows;
      if (resamples * n > LIMIT.resampleCells) throw new OutOfBounds();
    }
    if (p.has('stability')) {
      const s = p.get('stability');
      const count = s instanceof Map && Array.isArray(s.get('sizes')) ? s.get('sizes').length : 0;
      if (count > LIMIT.stabilitySizes) throw new OutOfBounds();
    }
    if ([...sizes.values()].reduce((a, b) => a + b, 0) > rows) throw new OutOfBounds();
    return { rows, classes, steps, sizes, resamples };
  } catch {
    return null;
  }
}

/** path -> cap of the files the format names; any other file's cap is LIMIT.small. */
export function fileCaps(dims) {
  const caps = new Map([[PROTOCOL, LIMIT.protocol]]);
  if (!dims) {
    SIZED.forEach((p) => caps.set(p, LIMIT.file));
    return caps;
  }
  caps.set('data/pools.json', LIMIT.slack + dims.rows * LIMIT.poolsPerRow);
  for (const pool of ['calibration', 'audit']) {
    const rows = dims.sizes.has(pool) ? dims.sizes.get(pool) : dims.rows;
    caps.set(`data/predictions/${pool}.parquet`, LIMIT.slack + rows * (LIMIT.parquetPerRow + dims.classes * LIMIT.parquetPerCell));
  }
  caps.set('data/trajectory.json', LIMIT.slack + dims.steps * LIMIT.trajectoryPerStep);
  for (const [p, v] of caps) caps.set(p, Math.min(v, LIMIT.file));
  return caps;
}

/** The bag with every file over its cap (or past the total) moved from `files` to `oversized`,
 * in path order, as the Python verifier reads a bag: the protocol first, since it sets the caps. */
export function applyCaps(bag) {
  const protocol = bag.files.get(PROTOCOL);
  const caps = fileCaps(protocol && protocol.length <= LIMIT.protocol ? dimensions(protocol) : null);
  const files = new Map();
  const oversized = [];
  let total = 0;
  for (const path of [...bag.files.keys()].sort()) {
    const data = bag.files.get(path);
    const cap = caps.has(path) ? caps.get(path) : LIMIT.small;
    if (data.length > cap || total + data.length > LIMIT.total) {
      oversized.push(`${path} (${data.length.toLocaleString('en-US')} bytes, over the cap of ${cap.toLocaleString('en-US')})`);
      continue;
    }
    total += data.length;
    files.set(path, data);
  }
  return { ...bag, files, oversized };
}
