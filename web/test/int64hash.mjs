// Hash int64 streams with web/src/int64hash.js for tests/web/test_int64hash.py to compare with hashlib:
//   node web/test/int64hash.mjs JOB.json
// JOB.json is [{"file": path of little-endian int64 values, "chunks": [lengths, in values]}, ...]; each
// case's values are fed in rows of those lengths (the last length repeated until the values run out),
// as a Uint32Array where every value is below 2**32, else a Float64Array. Prints one line of JSON per
// case: {"wasm": hex, "js": hex, "kinds": [the two hashers' kinds]}.
import { readFileSync } from 'node:fs';
import { int64Sha256 } from '../src/int64hash.js';

const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));
for (const c of cases) {
  const bytes = readFileSync(c.file);
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const values = Float64Array.from({ length: words.length / 2 }, (_, i) => words[2 * i] + words[2 * i + 1] * 0x100000000);
  const small = values.every((v) => v < 0x100000000);
  const out = { kinds: [] };
  for (const webAssembly of [true, false]) {
    const hasher = await int64Sha256({ webAssembly });
    let at = 0;
    for (let k = 0; at < values.length || (k === 0 && values.length === 0); k++) {
      const len = Math.min(c.chunks[Math.min(k, c.chunks.length - 1)], values.length - at);
      const row = small ? Uint32Array.from(values.subarray(at, at + len)) : values.slice(at, at + len);
      hasher.update(row);
      at += len;
      if (values.length === 0) break;
    }
    out[webAssembly ? 'wasm' : 'js'] = hasher.hex();
    out.kinds.push(hasher.kind);
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}
