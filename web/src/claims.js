// The signed predicate restates the payload (bundle/FORMAT.md "Predicate"): each claim is derived
// again from the payload files, this page's copy of the schemas and the signer, and compared with
// what was signed, value and JSON kind alike (3 is not 3.0, true is not 1), as parseRaw trees.

import { Failed } from './bag.js';
import { Num } from './json.js';

const HEADLINE = ['accuracy', 'nll', 'brier', 'ece', 'mce'];
const CHECKED_ELSEWHERE = ['format', 'publication'];
/** Format -> the payload schemas whose current revision belongs to a later format. */
const NEWER_THAN = { 1: new Set(['environment', 'metrics', 'protocol', 'resources']) };

const isDict = (v) => v instanceof Map || (v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Num));
const keysOf = (v) => (v instanceof Map ? [...v.keys()] : Object.keys(v));
const getOf = (v, k) => (v instanceof Map ? v.get(k) : v[k]);
const hasOf = (v, k) => (v instanceof Map ? v.has(k) : Object.prototype.hasOwnProperty.call(v, k));

/** Python's type name of a parseRaw value (or a plain object standing for a dict). */
function kind(v) {
  if (v === null || v === undefined) return 'NoneType';
  if (v instanceof Num) return v.integer ? 'int' : 'float';
  if (Array.isArray(v)) return 'list';
  if (isDict(v)) return 'dict';
  return typeof v === 'boolean' ? 'bool' : 'str';
}

function equal(a, b) {
  const k = kind(a);
  if (k !== kind(b)) return false;
  if (k === 'int') return BigInt(a.token) === BigInt(b.token);
  if (k === 'float') return a.value === b.value;
  if (k === 'list') return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (k === 'dict') return keysOf(a).length === keysOf(b).length && keysOf(a).every((key) => hasOf(b, key) && equal(getOf(a, key), getOf(b, key)));
  return a === b || (k === 'NoneType');
}

const shown = (v) => (v instanceof Num ? v.token : JSON.stringify(v instanceof Map ? Object.fromEntries(v) : v) ?? 'None').slice(0, 40);

function diff(found, expected, where, out) {
  if (kind(expected) === 'dict' && kind(found) === 'dict') {
    for (const key of [...new Set([...keysOf(found), ...keysOf(expected)])].sort()) {
      if (!hasOf(found, key)) out.push(`${where}.${key} is missing`);
      else if (!hasOf(expected, key)) out.push(`${where}.${key} is not a payload fact`);
      else diff(getOf(found, key), getOf(expected, key), `${where}.${key}`, out);
    }
  } else if (kind(expected) === 'list' && kind(found) === 'list' && found.length === expected.length) {
    found.forEach((f, i) => diff(f, expected[i], `${where}[${i}]`, out));
  } else if (!equal(found, expected)) out.push(`${where}: signed ${shown(found)}, payload ${shown(expected)}`);
}

/**
 * Failed unless the signed predicate (a parseRaw tree) restates the payload. `records`: the
 * parseRaw trees of resources.json, temperature.json and metrics.json; `shas`: the sha256 of
 * protocol.json and temperature.json; `schemas`: [{path, name, id, sha256, present}] of every JSON
 * payload file the format defines (present: in the bag), this page's revision of its schema;
 * `released`: format -> schema name -> earlier digests; `signer`: the signer's fingerprint.
 */
export function checkClaims(predicate, { records, shas, schemas, released, signer }) {
  const { resources, temperature, metrics } = records;
  const audit = getOf(getOf(metrics, 'pools'), 'audit');
  const pick = (node, keys) => Object.fromEntries(keys.map((k) => [k, getOf(node, k)]));
  const expected = {
    protocol_sha256: shas.protocol,
    profile: getOf(resources, 'profile'),
    resources: Object.fromEntries(['model', 'dataset'].map((part) => {
      const r = getOf(resources, part);
      return [part, { ...pick(r, ['repo_id', 'revision', 'source']), files: getOf(r, 'files').map((f) => pick(f, ['path', 'sha256', 'pinned_sha256', 'pin', 'matches_pin'])) }];
    })),
    temperature: { ...pick(temperature, ['temperature', 'beta', 'boundary']), sha256: shas.temperature },
    audit: { n: getOf(getOf(audit, 'raw'), 'n'), raw: pick(getOf(audit, 'raw'), HEADLINE), calibrated: pick(getOf(audit, 'calibrated'), HEADLINE) },
    schemas: Object.fromEntries(schemas.filter((s) => s.present).map((s) => [s.path, { id: s.id, sha256: s.sha256 }])),
    signer_fingerprint: signer,
  };
  for (const k of CHECKED_ELSEWHERE) if (hasOf(predicate, k)) expected[k] = getOf(predicate, k);
  const signed = hasOf(predicate, 'schemas') ? getOf(predicate, 'schemas') : null;
  const fmt = hasOf(predicate, 'format') ? getOf(predicate, 'format') : null;
  const version = kind(fmt) === 'dict' && getOf(fmt, 'version') instanceof Num && getOf(fmt, 'version').integer ? getOf(fmt, 'version').value : null;
  if (kind(signed) === 'dict' && version !== null) {
    const byPath = new Map(schemas.map((s) => [s.path, s]));
    const newer = keysOf(signed).sort().filter((path) => {
      const s = byPath.get(path);
      const pin = getOf(signed, path);
      return s && (NEWER_THAN[version] || new Set()).has(s.name) && kind(pin) === 'dict' && getOf(pin, 'sha256') === s.sha256;
    });
    if (newer.length) throw new Failed(`the bundle states format ${version} but names a later format's schema for ${newer.join(', ')}; it is not a format-${version} bundle.`);
    for (const path of keysOf(signed)) {
      const s = byPath.get(path);
      const pin = getOf(signed, path);
      if (s && path in expected.schemas && kind(pin) === 'dict' && getOf(pin, 'id') === s.id && ((released[version] || {})[s.name] || []).includes(getOf(pin, 'sha256'))) {
        expected.schemas[path] = pin; // an earlier revision of this format's schema
      }
    }
  }
  const diffs = [];
  diff(predicate, expected, 'predicate', diffs);
  const schemaDiffs = diffs.filter((d) => d.startsWith('predicate.schemas'));
  if (schemaDiffs.length) throw new Failed(`the bundle was written against schemas this page does not know: ${schemaDiffs[0]}; use the verifier release that matches the bundle.`);
  if (diffs.length) throw new Failed(`the signed predicate does not restate the payload: ${diffs.slice(0, 2).join('; ')}${diffs.length > 2 ? ` (+${diffs.length - 2} more)` : ''}.`);
  return 'protocol, profile, resource pins, temperature, audit headline, schema pins and signer all equal the payload and the verifier\'s schemas';
}
