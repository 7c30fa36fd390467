// Run the page's estimators (web/src/estimators.js) under node for the tests: reads a JSON job
// from stdin and writes the page's records as JSON to stdout.
//
// node web/test/estimators.mjs < JOB.json
//   JOB.json: {"cases": [{"protocol": {...}, "k": K, "z": [row-major logits], "y": [labels],
//   "beta": b, "rows": [[audit positions], ...] or null}], "clopper": [[k, n, level], ...]}
//   out: {"records": [metrics.json `estimators`, ...], "clopper": [[lower, upper], ...]}

import { readFileSync } from 'node:fs';
import { clopperPearson } from '../src/beta.js';
import { expectedRecord } from '../src/estimators.js';

const job = JSON.parse(readFileSync(0, 'utf8'));
const records = await Promise.all((job.cases || []).map(async (c) => {
  const pool = { n: c.y.length, k: c.k, z: Float64Array.from(c.z), y: Int32Array.from(c.y) };
  const rows = c.rows === null || c.rows === undefined ? null : c.rows.map((r) => Int32Array.from(r));
  return (await expectedRecord(c.protocol, pool, c.beta, rows)).record;
}));
const clopper = (job.clopper || []).map(([k, n, level]) => clopperPearson(k, n, level));
process.stdout.write(JSON.stringify({ records, clopper }));
