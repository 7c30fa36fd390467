// Write the resample matrices of web/src/pcg64.js for tests/web/test_pcg64.py to compare with numpy:
//   node web/test/draws.mjs JOB.json OUT_DIR
// JOB.json is [{"seed": "decimal string", "n": int, "resamples": int, "columns": int (optional)}, ...];
// OUT_DIR/<i>.bin receives case i's matrix, integers(0, n, size=(resamples, columns)) with columns = n
// unless given (resampleRows' rows), as little-endian int64 in C order (what indices_sha256 hashes). Prints one line of
// JSON per case with its drawing time in milliseconds, what drew it ("wasm" or "js") and whether every
// row's draw counts (resampleRows with counts) were its counts; "js": true in a case draws it by the
// JavaScript loop instead of WebAssembly.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PCG64, drawsBy, resampleRows } from '../src/pcg64.js';

const [jobPath, outDir] = process.argv.slice(2);
const cases = JSON.parse(readFileSync(jobPath, 'utf8'));
cases.forEach((c, i) => {
  const columns = c.columns ?? c.n;
  const out = new Uint32Array(columns * c.resamples * 2);
  const t0 = performance.now();
  let at = 0;
  const rng = new PCG64(BigInt(c.seed));
  const buffer = c.n <= 0x100000000 ? new Uint32Array(columns) : new Float64Array(columns);
  const lemire = c.n > 1 && c.n - 1 < 0xffffffff;
  const draw = () => (c.js && lemire ? (rng.fillLemire32Js(buffer, c.n), buffer) : rng.fill(buffer, c.n)).slice();
  // resampleRows' rows come with their draw counts: each checked against counting the row here
  const whole = c.columns === undefined && !c.js;
  const counts = new Float64Array(whole ? c.n : 0);
  const recount = new Float64Array(whole ? c.n : 0);
  let countsOk = true;
  const rows = whole ? resampleRows(BigInt(c.seed), c.n, c.resamples, counts)
    : Array.from({ length: c.resamples }, draw);
  for (const row of rows) {
    if (whole) {
      recount.fill(0);
      for (const v of row) recount[v] += 1;
      countsOk = countsOk && recount.every((v, i) => v === counts[i]);
    }
    for (let j = 0; j < row.length; j++, at += 2) {
      const v = row[j];
      out[at] = v % 0x100000000;
      out[at + 1] = Math.floor(v / 0x100000000);
    }
  }
  const ms = performance.now() - t0;
  writeFileSync(join(outDir, `${i}.bin`), new Uint8Array(out.buffer));
  process.stdout.write(`${JSON.stringify({ case: i, ms, by: c.js ? 'js' : drawsBy(), countsOk })}\n`);
});
