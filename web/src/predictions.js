// The predictions Parquet files (bundle/FORMAT.md "Predictions Parquet"), read with hyparquet and
// zstd (fzstd, pure JavaScript: no WebAssembly, which the page's CSP does not allow). The footer is
// checked against the protocol's pool size before any column is decoded: a few kilobytes of zstd
// can announce gigabytes of identical rows.

import { parquetMetadata, parquetRead, parquetSchema } from 'hyparquet';
import { decompress } from 'fzstd';
import { Failed } from './bag.js';

/** zstd into a buffer of the size the page header announces (so a hostile frame header cannot make
 * fzstd allocate more). fzstd tests its output argument with `w == 1`, which turns a Uint8Array into
 * a string of all its bytes (measured: 60% of the time of reading a 25,000-row file); the buffer's
 * own primitive value makes that comparison cheap and changes nothing else. */
function zstd(input, outputLength) {
  const out = new Uint8Array(outputLength);
  out[Symbol.toPrimitive] = () => 0;
  return decompress(input, out);
}
const compressors = { ZSTD: zstd };

/** Bytes a predictions file may hold per row and per logit cell, and slack (FORMAT.md "Limits"). */
const CAP = { slack: 64 * 1024, perRow: 512, perCell: 16 };

/** The format's columns for K classes: [name, physical type, logical type or null]. */
export function expectedColumns(k, fullCounts = true) {
  const cols = [['idx', 'INT32'], ['split_key', 'BYTE_ARRAY', 'STRING'], ['text_sha256', 'BYTE_ARRAY', 'STRING'], ['label', 'INT64']];
  for (let j = 0; j < k; j++) cols.push([`logit_${j}`, 'FLOAT']);
  for (let j = 0; j < k; j++) cols.push([`prob_${j}`, 'DOUBLE']);
  cols.push(['pred', 'INT64'], ['token_count', 'INT32'], ['truncated', 'BOOLEAN'], ['batch', 'INT32']);
  if (fullCounts) cols.push(['full_token_count', 'INT32']);
  return cols;
}

function logicalOf(el) {
  const lt = el.logical_type;
  if (lt && lt.type === 'STRING') return 'STRING';
  if (el.converted_type === 'UTF8') return 'STRING';
  if (lt && lt.type === 'INTEGER') return lt.bitWidth === 32 || lt.bitWidth === 64 ? (lt.isSigned ? null : 'UNSIGNED') : `INT${lt.bitWidth}`;
  if (lt || el.converted_type) return String((lt && lt.type) || el.converted_type);
  return null;
}

/**
 * The pool of predictions file `path`: {n, k, z, y, columns: {name: array}}. Failed (one sentence)
 * for a file over the pool's size, with other columns or types, nulls, a non-finite logit or a
 * label outside 0..K-1.
 */
export async function readPool(path, bytes, k, maxRows, fullCountsRequired) {
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  let metadata;
  try {
    metadata = parquetMetadata(buffer);
  } catch (e) {
    throw new Failed(`${path} cannot be read as Parquet (${String(e.message).slice(0, 200)}).`);
  }
  const leaves = parquetSchema(metadata).children.map((c) => c.element);
  const want = expectedColumns(k).length;
  if (leaves.length !== want && leaves.length !== want - 1) throw new Failed(`${path} has ${leaves.length} columns, the format has ${want} for ${k} classes.`);
  const rows = Number(metadata.num_rows);
  if (rows > maxRows) throw new Failed(`${path} declares ${rows.toLocaleString('en-US')} rows, the protocol's pool holds ${maxRows.toLocaleString('en-US')}.`);
  const cap = CAP.slack + maxRows * (CAP.perRow + k * CAP.perCell);
  const size = metadata.row_groups.reduce((s, g) => s + Number(g.total_byte_size), 0);
  if (size > cap) throw new Failed(`${path} declares ${size.toLocaleString('en-US')} bytes of column data, over the ${cap.toLocaleString('en-US')} its rows may hold.`);
  const hasFull = leaves.some((el) => el.name === 'full_token_count');
  const expected = expectedColumns(k, fullCountsRequired || hasFull);
  const got = leaves.map((el) => [el.name, el.type, logicalOf(el)]);
  if (got.length !== expected.length || got.some((g, j) => g[0] !== expected[j][0] || g[1] !== expected[j][1] || g[2] !== (expected[j][2] || null))) {
    throw new Failed(`${path} does not have the format's columns, in its order and types.`);
  }
  const columns = Object.fromEntries(expected.map(([name]) => [name, new Array(rows)]));
  try {
    await parquetRead({
      file: buffer, metadata, compressors, columns: expected.map(([name]) => name),
      onChunk: ({ columnName, columnData, rowStart }) => {
        const col = columns[columnName];
        for (let i = 0; i < columnData.length && rowStart + i < rows; i++) col[rowStart + i] = columnData[i];
      },
    });
  } catch (e) {
    throw new Failed(`${path} cannot be read as Parquet (${String(e.message).slice(0, 200)}).`);
  }
  for (const [name] of expected) {
    const col = columns[name];
    if (col.length !== rows) throw new Failed(`${path} column '${name}' holds ${col.length} values for ${rows} rows.`);
    for (let i = 0; i < col.length; i++) if (col[i] === null || col[i] === undefined) throw new Failed(`${path} column '${name}' holds nulls.`);
  }
  const z = new Float64Array(rows * k);
  for (let j = 0; j < k; j++) {
    const col = columns[`logit_${j}`];
    for (let i = 0; i < rows; i++) {
      const v = col[i];
      if (!Number.isFinite(v)) throw new Failed(`${path} holds a logit that is NaN or infinite.`);
      z[i * k + j] = v;
    }
  }
  const y = new Int32Array(rows);
  const labels = columns.label;
  for (let i = 0; i < rows; i++) {
    const v = Number(labels[i]);
    if (v < 0 || v >= k) throw new Failed(`${path} holds labels outside 0..${k - 1}.`);
    y[i] = v;
  }
  return { n: rows, k, z, y, columns };
}
