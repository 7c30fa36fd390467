// data/report.md's machine-checkable tables against the records (bundle/FORMAT.md "report.md"):
// a table is the line `<!-- table: NAME -->`, a header row, a separator row, then rows up to the
// first line that does not start with `|`; the first cell of a row is its key. The cells the
// records require are formatted by the format's one rule: a float as Python's format(x, ".6f"), a
// change as format(cal - raw, "+.6f") (or "+d" between two integers), an integer as written,
// true/false as yes/no, null as n/a, a string made inert for Markdown ("Text from records").
// Records are read as parseRaw trees, so that 3 and 3.0 stay apart as the rule needs.

import { Failed } from './bag.js';
import { Num } from './json.js';

// -- Python's formats ----------------------------------------------------------------------------

/** Python's format(x, '.6f') for a finite x >= 0: JavaScript's toFixed, but a tie (the exact value
 * ends in a 5 at the seventh decimal, as 1/128 does) rounds to even, as Python does. */
function fixed6(x) {
  const exact = x.toFixed(30); // exact: a double's tie shows within 30 decimals
  const dot = exact.indexOf('.');
  const tail = exact.slice(dot + 7);
  if (tail[0] === '5' && /^50*$/.test(tail)) {
    const truncated = exact.slice(0, dot + 7);
    if (Number(truncated[truncated.length - 1]) % 2 === 0) return truncated;
  }
  return x.toFixed(6);
}

const negative = (x) => x < 0 || Object.is(x, -0);
const pyFixed6 = (x) => (negative(x) ? `-${fixed6(-x)}` : fixed6(x));
const pySigned6 = (x) => (negative(x) ? `-${fixed6(-x)}` : `+${fixed6(x)}`);

// -- Text from records (bundle/FORMAT.md): the rules of the format, on code points ----------------

const ALWAYS = /[\\`*[\]<>|~&$#:]/g;
const LINE_BREAKING = /[\x00-\x1f\x7f\x80-\x9f\u2028\u2029\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g;
const EMAIL_AT = /@(?=[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.[A-Za-z0-9])/g;
const WWW_DOT = /(?<=[Ww][Ww][Ww])\./g;
const INERT_UNDERSCORE = /(?<=[A-Za-z0-9])\\_(?=[A-Za-z0-9])/g;
const LIST_NUMBER = /^([0-9]{1,9})([.)])(?=[ \t]|$)/;

/** A record's string as Markdown text that makes no structure (escaped only where it could). */
export function markdownText(s) {
  let t = s.replace(/^[ \t]+/, '').replace(ALWAYS, (c) => `\\${c}`);
  t = t.replace(EMAIL_AT, '\\@').replace(WWW_DOT, '\\.');
  t = t.replace(/_/g, '\\_').replace(INERT_UNDERSCORE, '_');
  if (['-', '+', '='].includes(t.slice(0, 1))) t = `\\${t}`;
  t = t.replace(LIST_NUMBER, '$1\\$2');
  return t.replace(LINE_BREAKING, (c) => `\\\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

// -- the formatting rule ---------------------------------------------------------------------------

/** One record value (a parseRaw node) as a table cell. */
function fmt(value) {
  if (value === null || value === undefined) return 'n/a';
  if (value === true) return 'yes';
  if (value === false) return 'no';
  if (value instanceof Num) return value.integer ? BigInt(value.token).toString() : pyFixed6(value.value);
  if (typeof value === 'string') return markdownText(value);
  throw new Failed(`a record holds ${Array.isArray(value) ? 'list' : 'dict'} where the report needs a number, a flag, null or a string.`);
}

/** calibrated minus raw, with its sign. */
function fmtChange(calibrated, raw) {
  if (calibrated instanceof Num && raw instanceof Num) {
    if (calibrated.integer && raw.integer) {
      const d = BigInt(calibrated.token) - BigInt(raw.token);
      return d < 0n ? d.toString() : `+${d}`;
    }
    return pySigned6(calibrated.value - raw.value);
  }
  throw new Failed('no change between the calibrated and the raw value: both must be numbers.');
}

const get = (node, key) => (node instanceof Map ? node.get(key) : undefined);
const entries = (node) => (node instanceof Map ? [...node.entries()] : []);

const METRIC_ROWS = ['n', 'correct', 'accuracy', 'mean_confidence', 'nll', 'brier', 'ece', 'mce'];
const TEMPERATURE_ROWS = ['temperature', 'beta', 't_min', 't_max', 'steps', 'boundary', 'nll_before', 'nll_after'];

function metricRows(pool) {
  const [raw, cal] = [get(pool, 'raw'), get(pool, 'calibrated')];
  return Object.fromEntries(METRIC_ROWS.map((row) => [row, { raw: fmt(get(raw, row)), calibrated: fmt(get(cal, row)), change: fmtChange(get(cal, row), get(raw, row)) }]));
}

function estimatorTables(record) {
  const tables = {};
  if (record === undefined || record === null) return tables;
  const scalar = {};
  for (const [name, result] of entries(get(record, 'results'))) {
    const [raw, cal] = [get(result, 'raw'), get(result, 'calibrated')];
    if (get(result, 'kind') === 'bin-intervals') {
      const rows = {};
      get(raw, 'bins').forEach((_, b) => {
        const row = {};
        for (const [side, doc] of [['raw', raw], ['calibrated', cal]]) for (const c of ['count', 'correct', 'lower', 'upper']) row[`${side}_${c}`] = fmt(get(get(doc, 'bins')[b], c));
        rows[String(b)] = row;
      });
      tables[`bin-intervals-${markdownText(name)}`] = rows;
      continue;
    }
    const both = get(raw, 'value') !== null && get(cal, 'value') !== null;
    const difference = get(result, 'difference');
    scalar[markdownText(name)] = {
      raw: fmt(get(raw, 'value')), calibrated: fmt(get(cal, 'value')),
      change: both ? fmtChange(get(cal, 'value'), get(raw, 'value')) : 'n/a',
      ...Object.fromEntries(['lower', 'upper', 'verdict'].map((c) => [c, fmt(get(difference, c))])),
    };
  }
  if (Object.keys(scalar).length) tables.estimators = scalar;
  return tables;
}

/** {table: {row: {column: cell}}} that report.md must hold, from the records' parseRaw trees. */
export function requiredTables(metrics, temperature, pools, bootstrap, stability) {
  const byPool = get(metrics, 'pools');
  const audit = get(byPool, 'audit');
  const tables = {
    pools: Object.fromEntries(entries(get(pools, 'sizes')).map(([name, size]) => [markdownText(name), { size: fmt(size) }])),
    temperature: Object.fromEntries(TEMPERATURE_ROWS.map((row) => [row, { value: fmt(get(temperature, row)) }])),
    'metrics-audit': metricRows(audit),
    'metrics-calibration': metricRows(get(byPool, 'calibration')),
    threshold: {},
    'bins-audit': {},
  };
  for (const pool of ['audit', 'calibration']) {
    for (const kind of ['raw', 'calibrated']) {
      const threshold = get(get(get(byPool, pool), kind), 'threshold');
      tables.threshold[`${pool}/${kind}`] = Object.fromEntries(['value', 'accepted', 'wrong_accepted'].map((c) => [c, fmt(get(threshold, c))]));
    }
  }
  get(get(audit, 'raw'), 'bins').forEach((rawBin, b) => {
    const row = { lower: fmt(get(rawBin, 'lower')), upper: fmt(get(rawBin, 'upper')) };
    for (const kind of ['raw', 'calibrated']) for (const c of ['count', 'accuracy', 'mean_confidence']) row[`${kind}_${c}`] = fmt(get(get(get(audit, kind), 'bins')[b], c));
    tables['bins-audit'][String(b)] = row;
  });
  Object.assign(tables, estimatorTables(get(metrics, 'estimators')));
  if (bootstrap) {
    tables.bootstrap = Object.fromEntries(entries(get(bootstrap, 'differences')).map(([metric, d]) => [markdownText(metric), Object.fromEntries(['point', 'lower', 'upper', 'verdict'].map((c) => [c, fmt(get(d, c))]))]));
  }
  if (stability) {
    const rows = {};
    for (const e of get(stability, 'sizes')) rows[String(get(e, 'm').token)] = Object.fromEntries(['temperature', 'boundary', 'audit_nll'].map((c) => [c, fmt(get(e, c))]));
    rows.raw = { temperature: pyFixed6(1), boundary: 'no', audit_nll: fmt(get(stability, 'audit_nll_raw')) };
    tables.stability = rows;
  }
  return tables;
}

// -- the tables the report holds -------------------------------------------------------------------

// Python's str.strip() whitespace (str.isspace), not JavaScript's trim().
const PY_SPACE = '\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, 'g');
const pyStrip = (s) => s.replace(STRIP, '');
const MARKER = /^<!-- table: ([a-z0-9-]+) -->$/;
const SEPARATOR = /^:?-{3,}:?$/;
const IMAGE = new RegExp(`!\\[[^\\[\\]\\n]*\\]\\(([^()\\[\\]${PY_SPACE}]+)\\)`, 'g');

function cells(line) {
  let body = pyStrip(line);
  if (body.startsWith('|')) body = body.slice(1);
  if (body.endsWith('|')) body = body.slice(0, -1);
  return body.split('|').map(pyStrip);
}

/** Every marked table of the report; Failed on a malformed, repeated or ragged one. */
export function parseTables(text) {
  const lines = text.split('\n');
  const tables = new Map();
  let i = 0;
  while (i < lines.length) {
    const marker = MARKER.exec(lines[i]);
    i += 1;
    if (!marker) continue;
    const name = marker[1];
    if (tables.has(name)) throw new Failed(`report.md has the table '${name}' twice.`);
    if (i + 1 >= lines.length || !lines[i].startsWith('|') || !lines[i + 1].startsWith('|')) throw new Failed(`report.md table '${name}' lacks its header and separator rows.`);
    const header = cells(lines[i]);
    const separator = cells(lines[i + 1]);
    if (separator.length !== header.length || !separator.every((c) => SEPARATOR.test(c))) throw new Failed(`report.md table '${name}': the second row is not a separator row matching the header's ${header.length} columns.`);
    const columns = header.slice(1);
    if (new Set(columns).size !== columns.length) throw new Failed(`report.md table '${name}' names a column twice.`);
    i += 2;
    const rows = new Map();
    while (i < lines.length && lines[i].startsWith('|')) {
      const row = cells(lines[i]);
      if (row.length !== header.length) throw new Failed(`report.md table '${name}': row '${row[0]}' has ${row.length} cells, the header ${header.length}.`);
      if (rows.has(row[0])) throw new Failed(`report.md table '${name}' has the row '${row[0]}' twice.`);
      rows.set(row[0], new Map(columns.map((c, k) => [c, row[k + 1]])));
      i += 1;
    }
    tables.set(name, rows);
  }
  return tables;
}

/** Differences between the report's tables and the required ones; empty when equal. */
function differences(found, required) {
  const problems = Object.keys(required).filter((n) => !found.has(n)).map((n) => `table '${n}' is missing`);
  for (const n of found.keys()) if (!(n in required)) problems.push(`table '${n}' is not one the format defines here`);
  for (const [name, rows] of Object.entries(required)) {
    const got = found.get(name);
    if (!got) continue;
    for (const [key, want] of Object.entries(rows)) {
      const have = got.get(key);
      if (!have) {
        problems.push(`${name}: row '${key}' is missing`);
        continue;
      }
      for (const column of [...new Set([...Object.keys(want), ...have.keys()])].sort()) {
        const [w, h] = [want[column], have.get(column)];
        if (w === h) continue;
        if (h === undefined) problems.push(`${name}[${key}]: column '${column}' is missing`);
        else if (w === undefined) problems.push(`${name}[${key}]: column '${column}' is not expected`);
        else problems.push(`${name}[${key}][${column}] is '${h}', the records give '${w}'`);
      }
    }
    for (const key of got.keys()) if (!(key in rows)) problems.push(`${name}: row '${key}' is not in the records`);
  }
  return problems;
}

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Failed unless report.md is UTF-8, its tables equal the records' and its images name payload files. */
export function checkReport(data, records, payload) {
  let text;
  try {
    text = decoder.decode(data);
  } catch {
    throw new Failed('data/report.md is not UTF-8.');
  }
  const found = parseTables(text);
  const required = requiredTables(records.metrics, records.temperature, records.pools, records.bootstrap, records.stability);
  const problems = differences(found, required);
  for (const [, target] of text.matchAll(IMAGE)) {
    if (!payload.has(`data/${target}`) || target.startsWith('/') || target.startsWith('..')) problems.push(`the image '${target}' is not a file of the bundle`);
  }
  if (problems.length) throw new Failed(`report.md does not restate the records: ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? ` (+${problems.length - 3} more)` : ''}.`);
  const count = Object.values(required).reduce((s, rows) => s + Object.values(rows).reduce((t, c) => t + Object.keys(c).length, 0), 0);
  return `${Object.keys(required).length} tables (${Object.keys(required).join(', ')}), ${count} cells equal the records under the formatting rule`;
}
