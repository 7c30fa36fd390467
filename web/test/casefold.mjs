// The page's casefold (web/src/casefold.js) of every code point, for the tests: writes one line
// per code point 0..0x10FFFF, the folding's code points in hex separated by spaces.
//
// node web/test/casefold.mjs > OUT
import { writeSync } from 'node:fs';
import { casefold } from '../src/casefold.js';

const lines = [];
for (let c = 0; c < 0x110000; c++) {
  lines.push([...casefold(String.fromCodePoint(c))].map((ch) => ch.codePointAt(0).toString(16)).join(' '));
  if (lines.length === 65536) writeSync(1, `${lines.splice(0).join('\n')}\n`);
}
if (lines.length) writeSync(1, `${lines.join('\n')}\n`);
