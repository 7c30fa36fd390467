// Strict JSON as bundle/FORMAT.md reads it, and its canonical bytes, written again from the format.
//
// parse(bytes) refuses what the Python reader refuses: invalid UTF-8, duplicate keys, NaN and
// Infinity (JSON has no such tokens), numbers that overflow to infinity, nesting deeper than 64.
// It keeps every number's token, because canonical bytes are Python's: an integer token stays an
// integer and a float is written as Python's repr (1.0, 1e-05, 1e+16), which JavaScript's
// JSON.stringify would not give back.

export const MAX_DEPTH = 64;

export class JSONError extends Error {}

/** A parsed number: its value and whether its token was an integer (no '.', 'e' or 'E'). */
export class Num {
  constructor(value, integer, token) {
    this.value = value;
    this.integer = integer;
    this.token = token;
  }
}

const decoder = new TextDecoder('utf-8', { fatal: true });

/** The text of UTF-8 `bytes`; JSONError naming `source` when they are not UTF-8. */
export function utf8(bytes, source) {
  try {
    return decoder.decode(bytes);
  } catch {
    throw new JSONError(`${source} is not UTF-8 text.`);
  }
}

/**
 * Parse strict JSON. Objects come back as Map (key order kept, duplicates refused), arrays as
 * Array, numbers as Num, strings, booleans and null as themselves.
 */
export function parseRaw(bytes, source = 'The document') {
  const text = typeof bytes === 'string' ? bytes : utf8(bytes, source);
  let i = 0;
  const fail = (what) => {
    throw new JSONError(`${source} is not strict JSON (${what} at character ${i}).`);
  };
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const str = () => {
    i++; // opening quote
    let out = '';
    let start = i;
    for (;;) {
      if (i >= text.length) fail('an unterminated string');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(start, i);
        i++;
        return out;
      }
      if (c < 0x20) fail('a control character in a string');
      if (c === 0x5c) {
        out += text.slice(start, i);
        const e = text[i + 1];
        const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
        if (e in simple) {
          out += simple[e];
          i += 2;
        } else if (e === 'u') {
          const hex = text.slice(i + 2, i + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('a bad \\u escape');
          out += String.fromCharCode(parseInt(hex, 16));
          i += 6;
        } else fail('a bad escape');
        start = i;
      } else i++;
    }
  };
  const num = () => {
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) fail('a bad number');
    const token = m[0];
    i += token.length;
    const value = Number(token);
    if (!Number.isFinite(value)) fail(`the number ${token.slice(0, 40)} overflowing`);
    return new Num(value, !/[.eE]/.test(token), token);
  };
  const value = (depth) => {
    ws();
    const c = text[i];
    if (c === '{' || c === '[') {
      if (depth >= MAX_DEPTH) fail(`nesting deeper than ${MAX_DEPTH}`);
      i++;
      if (c === '[') {
        const arr = [];
        ws();
        if (text[i] === ']') {
          i++;
          return arr;
        }
        for (;;) {
          arr.push(value(depth + 1));
          ws();
          if (text[i] === ',') i++;
          else if (text[i] === ']') {
            i++;
            return arr;
          } else fail("a missing ',' or ']'");
        }
      }
      const obj = new Map();
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('a key that is not a string');
        const key = str();
        if (obj.has(key)) fail(`the duplicate key ${JSON.stringify(key).slice(0, 60)}`);
        ws();
        if (text[i] !== ':') fail("a missing ':'");
        i++;
        obj.set(key, value(depth + 1));
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === '}') {
          i++;
          return obj;
        } else fail("a missing ',' or '}'");
      }
    }
    if (c === '"') return str();
    if (c === '-' || (c >= '0' && c <= '9')) return num();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    return fail('an unexpected token');
  };
  const doc = value(0);
  ws();
  if (i !== text.length) fail('data after the document');
  return doc;
}

/** The plain JavaScript value of a parseRaw result (objects, arrays, numbers). */
export function plain(node) {
  if (node instanceof Num) return node.value;
  if (node instanceof Map) {
    const out = Object.create(null);
    for (const [k, v] of node) out[k] = plain(v);
    return out;
  }
  if (Array.isArray(node)) return node.map(plain);
  return node;
}

/** parse + plain: strict JSON as plain values. */
export function parse(bytes, source) {
  return plain(parseRaw(bytes, source));
}

/** Python's repr of a finite float: the shortest round-trip digits (as JavaScript finds them),
 * laid out as Python does: exponent form when the exponent is below -4 or at least 16, with two
 * digits at least, and '.0' on an integral fixed value. */
export function pyFloat(x) {
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  const [mant, expText] = Math.abs(x).toExponential().split('e');
  const digits = mant.replace('.', '');
  const exp = parseInt(expText, 10);
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exp) < 10 ? `0${Math.abs(exp)}` : `${Math.abs(exp)}`;
    return `${sign}${m}e${exp < 0 ? '-' : '+'}${e}`;
  }
  let fixed;
  if (exp < 0) fixed = `0.${'0'.repeat(-exp - 1)}${digits}`;
  else if (digits.length <= exp + 1) fixed = `${digits}${'0'.repeat(exp + 1 - digits.length)}.0`;
  else fixed = `${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
  return sign + fixed;
}

const NEEDS_ESCAPE = /["\\\x00-\x1f]/;

function pyString(s) {
  if (!NEEDS_ESCAPE.test(s)) return `"${s}"`;
  let out = '"';
  for (let k = 0; k < s.length; k++) {
    const ch = s[k];
    const c = s.charCodeAt(k);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (c < 0x20) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

// Python sorts keys by code point; JavaScript's default sort compares UTF-16 units.
const SURROGATE = /[\ud800-\udfff]/;

function byCodePoint(a, b) {
  // Without surrogates, UTF-16 units order as code points do.
  if (!SURROGATE.test(a) && !SURROGATE.test(b)) return a < b ? -1 : a > b ? 1 : 0;
  const x = Array.from(a);
  const y = Array.from(b);
  for (let k = 0; k < Math.min(x.length, y.length); k++) {
    const d = x[k].codePointAt(0) - y[k].codePointAt(0);
    if (d) return d;
  }
  return x.length - y.length;
}

/** The canonical text of a parseRaw result: sorted keys, ',' and ':' only, floats as Python's
 * repr, integers as written, non-ASCII as itself, one trailing newline. */
export function canonical(node) {
  const parts = [];
  const walk = (n) => {
    if (n instanceof Num) {
      if (!n.integer) parts.push(pyFloat(n.value));
      else parts.push(/^(0|-?[1-9][0-9]{0,14})$/.test(n.token) ? n.token : BigInt(n.token).toString());
    } else if (n instanceof Map) {
      const keys = [...n.keys()].sort(byCodePoint);
      parts.push('{');
      keys.forEach((k, idx) => {
        if (idx) parts.push(',');
        parts.push(pyString(k), ':');
        walk(n.get(k));
      });
      parts.push('}');
    } else if (Array.isArray(n)) {
      parts.push('[');
      n.forEach((v, idx) => {
        if (idx) parts.push(',');
        walk(v);
      });
      parts.push(']');
    } else if (typeof n === 'string') parts.push(pyString(n));
    else parts.push(n === null ? 'null' : n ? 'true' : 'false');
  };
  walk(node);
  return `${parts.join('')}\n`;
}

/** Whether `bytes` are exactly the canonical bytes of the document they hold. */
export function isCanonical(bytes, raw) {
  const want = new TextEncoder().encode(canonical(raw));
  if (want.length !== bytes.length) return false;
  for (let k = 0; k < want.length; k++) if (want[k] !== bytes[k]) return false;
  return true;
}

const NUMBER = /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

/**
 * The plain value of `bytes` when they are exactly the canonical text of a document, else null.
 * The fast path for large records: the browser's JSON.parse reads the document, and a walk in
 * canonical order (sorted keys, Python's floats, integers as written) matches every token against
 * the text. A match to the last byte means the text is canonical and holds no duplicate key (the
 * walk would be short of the text), so the result is what parseRaw and plain give. On null the
 * caller takes the strict parser, which says what is wrong.
 */
export function canonicalDoc(bytes) {
  if (bytes.length < 2 || bytes[bytes.length - 1] !== 0x0a || (bytes[0] === 0xef && bytes[1] === 0xbb)) return null;
  let text;
  let value;
  try {
    text = utf8(bytes, '');
    value = JSON.parse(text);
  } catch {
    return null;
  }
  let i = 0;
  const mismatch = {};
  const walk = (v, depth) => {
    if (typeof v === 'string') {
      if (NEEDS_ESCAPE.test(v)) {
        const s = pyString(v);
        if (!text.startsWith(s, i)) throw mismatch;
        i += s.length;
      } else {
        if (text.charCodeAt(i) !== 0x22 || !text.startsWith(v, i + 1) || text.charCodeAt(i + 1 + v.length) !== 0x22) throw mismatch;
        i += v.length + 2;
      }
      return v;
    }
    if (typeof v === 'number') {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text);
      if (!m) throw mismatch;
      const token = m[0];
      const integer = !/[.eE]/.test(token);
      if (integer ? token === '-0' : !Number.isFinite(v) || token !== pyFloat(v)) throw mismatch;
      i += token.length;
      return v;
    }
    if (v === null || typeof v === 'boolean') {
      const s = v === null ? 'null' : v ? 'true' : 'false';
      if (!text.startsWith(s, i)) throw mismatch;
      i += s.length;
      return v;
    }
    if (depth >= MAX_DEPTH) throw mismatch;
    if (Array.isArray(v)) {
      if (text[i++] !== '[') throw mismatch;
      const out = new Array(v.length);
      for (let k = 0; k < v.length; k++) {
        if (k && text[i++] !== ',') throw mismatch;
        out[k] = walk(v[k], depth + 1);
      }
      if (text[i++] !== ']') throw mismatch;
      return out;
    }
    if (text[i++] !== '{') throw mismatch;
    const out = Object.create(null);
    const keys = Object.keys(v);
    // JSON.parse keeps the text's order (but for integer-like keys): a canonical text's is already sorted.
    let sorted = true;
    for (let k = 1; k < keys.length && sorted; k++) sorted = keys[k - 1] < keys[k];
    if (!sorted || keys.some((key) => SURROGATE.test(key))) keys.sort(byCodePoint);
    for (let k = 0; k < keys.length; k++) {
      if (k && text[i++] !== ',') throw mismatch;
      const key = pyString(keys[k]);
      if (!text.startsWith(key, i) || text[i + key.length] !== ':') throw mismatch;
      i += key.length + 1;
      out[keys[k]] = walk(v[keys[k]], depth + 1);
    }
    if (text[i++] !== '}') throw mismatch;
    return out;
  };
  try {
    const doc = walk(value, 0);
    return i === text.length - 1 ? doc : null;
  } catch (e) {
    if (e === mismatch) return null;
    throw e;
  }
}
