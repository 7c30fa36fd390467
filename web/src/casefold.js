// Python's str.casefold, which the label map's matching by name uses (FORMAT.md: labels compared
// ignoring case, as Python's casefold does): each code point replaced by its CaseFolding.txt C or
// F mapping (full folding: 'ß' -> 'ss', 'ﬁ' -> 'fi', final sigma -> 'σ', Cherokee small letters ->
// capitals), from the table scripts/casefold_table.py generates from Python 3.11 (Unicode 14.0.0).
// toLowerCase is not this: it lowercases, maps ß to itself and Cherokee the other way.

import { FULL, RUNS } from './casefold.generated.js';

let table = null;

/** code point -> its folding (a string), built once from the runs and the full foldings. */
function folds() {
  if (table === null) {
    table = new Map();
    for (const [first, count, stride, offset] of RUNS) {
      for (let i = 0; i < count; i++) table.set(first + i * stride, String.fromCodePoint(first + i * stride + offset));
    }
    for (const [c, ...to] of FULL) table.set(c, String.fromCodePoint(...to));
  }
  return table;
}

/** `text` case-folded exactly as Python 3.11's `text.casefold()` (a lone surrogate stays itself). */
export function casefold(text) {
  const map = folds();
  let out = '';
  for (const ch of text) {
    const f = map.get(ch.codePointAt(0));
    out += f === undefined ? ch : f;
  }
  return out;
}
