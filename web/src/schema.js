// A strict JSON Schema (draft 2020-12) validator for exactly the keywords the project's schemas use.
//
// A general validator compiles schemas with `new Function`, which the page's Content-Security-Policy
// forbids; this one interprets them. It refuses, when the page is built, a schema that uses a keyword
// it does not know (knownKeywords below), so that no constraint is ever silently ignored.

export const KNOWN = new Set([
  '$schema', '$id', '$defs', '$ref', 'title', 'description',
  'type', 'const', 'enum', 'properties', 'required', 'additionalProperties', 'propertyNames',
  'minProperties', 'maxProperties', 'items', 'prefixItems', 'minItems', 'maxItems', 'uniqueItems',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'minLength', 'maxLength', 'pattern',
  'oneOf', 'anyOf',
]);

export class SchemaError extends Error {
  constructor(message, pointer) {
    super(message);
    this.pointer = pointer;
  }
}

/** Every keyword of `schema` (recursively) that this validator does not implement. */
export function unknownKeywords(schema) {
  const found = new Set();
  const walk = (node, isSchema) => {
    if (!node || typeof node !== 'object') return;
    if (Array.isArray(node)) {
      node.forEach((n) => walk(n, isSchema));
      return;
    }
    if (!isSchema) return;
    for (const [k, v] of Object.entries(node)) {
      if (!KNOWN.has(k)) found.add(k);
      if (k === 'properties' || k === '$defs') Object.values(v).forEach((s) => walk(s, true));
      else if (['items', 'additionalProperties', 'propertyNames'].includes(k)) walk(v, true);
      else if (k === 'prefixItems' || k === 'oneOf' || k === 'anyOf') v.forEach((s) => walk(s, true));
    }
  };
  walk(schema, true);
  return [...found];
}

function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v; // object, string, number, boolean
}

function hasType(v, t) {
  const k = typeOf(v);
  if (t === 'integer') return k === 'number' && Number.isInteger(v);
  return k === t;
}

function equal(a, b) {
  if (typeOf(a) !== typeOf(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (a && typeof a === 'object') {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => k in b && equal(a[k], b[k]));
  }
  return a === b;
}

const patterns = new Map();
function regex(p) {
  if (!patterns.has(p)) patterns.set(p, new RegExp(p, 'u'));
  return patterns.get(p);
}

// Paths are linked lists ({up, key}), built into a JSON pointer only for a violation: a pools.json of
// 100,000 entries is walked without an array per value.
function pointerOf(path) {
  const keys = [];
  for (let at = path; at; at = at.up) keys.push(at.key);
  return keys.reverse().map((p) => `/${String(p).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}
const down = (path, key) => ({ up: path, key });

/** The length in code points, as JSON Schema counts it (UTF-16 units only when they could differ). */
function codePoints(v) {
  return /[\ud800-\udfff]/.test(v) ? Array.from(v).length : v.length;
}

/** A validator over `schemas` (each with its $id): validate(doc, id) throws SchemaError at the first
 * violation. Objects are plain objects (json.plain), whose keys never include a prototype's. */
export function makeValidator(schemas) {
  const byId = new Map(schemas.map((s) => [s.$id, s]));
  const resolve = (ref, root) => {
    if (ref.startsWith('#/$defs/')) return [root.$defs[ref.slice(8)], root];
    const target = byId.get(ref);
    if (!target) throw new SchemaError(`the schema reference ${ref} is unknown`, '');
    return [target, target];
  };
  const check = (v, s, root, path) => {
    const fail = (why) => {
      throw new SchemaError(`at ${pointerOf(path) || '/'}: ${why}`, pointerOf(path));
    };
    if (s === true) return;
    if (s === false) fail('no value is allowed here');
    if (s.$ref) {
      const [target, r] = resolve(s.$ref, root);
      check(v, target, r, path);
    }
    if ('type' in s) {
      const types = Array.isArray(s.type) ? s.type : [s.type];
      if (!types.some((t) => hasType(v, t))) fail(`${JSON.stringify(v)?.slice(0, 60)} is not of type ${types.join(' or ')}`);
    }
    if ('const' in s && !equal(v, s.const)) fail(`${JSON.stringify(v)?.slice(0, 60)} is not ${JSON.stringify(s.const)}`);
    if ('enum' in s && !s.enum.some((e) => equal(v, e))) fail(`${JSON.stringify(v)?.slice(0, 60)} is not one of ${JSON.stringify(s.enum).slice(0, 120)}`);
    if (typeOf(v) === 'number') {
      if ('minimum' in s && v < s.minimum) fail(`${v} is less than ${s.minimum}`);
      if ('maximum' in s && v > s.maximum) fail(`${v} is greater than ${s.maximum}`);
      if ('exclusiveMinimum' in s && v <= s.exclusiveMinimum) fail(`${v} is not above ${s.exclusiveMinimum}`);
      if ('exclusiveMaximum' in s && v >= s.exclusiveMaximum) fail(`${v} is not below ${s.exclusiveMaximum}`);
    }
    if (typeof v === 'string') {
      const len = codePoints(v);
      if ('minLength' in s && len < s.minLength) fail('the string is too short');
      if ('maxLength' in s && len > s.maxLength) fail('the string is too long');
      if ('pattern' in s && !regex(s.pattern).test(v)) fail(`${JSON.stringify(v).slice(0, 60)} does not match ${s.pattern}`);
    }
    if (Array.isArray(v)) {
      if ('minItems' in s && v.length < s.minItems) fail(`${v.length} items, fewer than ${s.minItems}`);
      if ('maxItems' in s && v.length > s.maxItems) fail(`${v.length} items, more than ${s.maxItems}`);
      if (s.uniqueItems) {
        for (let a = 0; a < v.length; a++) for (let b = a + 1; b < v.length; b++) if (equal(v[a], v[b])) fail('items are not unique');
      }
      const prefix = s.prefixItems || [];
      v.forEach((item, k) => {
        if (k < prefix.length) check(item, prefix[k], root, down(path, k));
        else if ('items' in s) check(item, s.items, root, down(path, k));
      });
    }
    if (typeOf(v) === 'object') {
      const keys = Object.keys(v);
      if ('minProperties' in s && keys.length < s.minProperties) fail('too few properties');
      if ('maxProperties' in s && keys.length > s.maxProperties) fail('too many properties');
      for (const r of s.required || []) if (!Object.prototype.hasOwnProperty.call(v, r)) fail(`'${r}' is a required property`);
      const props = s.properties || {};
      for (const k of keys) {
        if (s.propertyNames) check(k, s.propertyNames, root, down(path, k));
        if (Object.prototype.hasOwnProperty.call(props, k)) check(v[k], props[k], root, down(path, k));
        else if ('additionalProperties' in s) {
          if (s.additionalProperties === false) fail(`'${k}' was unexpected`);
          check(v[k], s.additionalProperties, root, down(path, k));
        }
      }
    }
    if (s.oneOf) {
      let matched = 0;
      for (const alt of s.oneOf) {
        try {
          check(v, alt, root, path);
          matched++;
        } catch (e) {
          if (!(e instanceof SchemaError)) throw e;
        }
      }
      if (matched !== 1) fail(`${matched} of the oneOf alternatives match, not exactly one`);
    }
    if (s.anyOf && !s.anyOf.some((alt) => {
      try {
        check(v, alt, root, path);
        return true;
      } catch (e) {
        if (!(e instanceof SchemaError)) throw e;
        return false;
      }
    })) fail('none of the anyOf alternatives matches');
  };
  return (doc, id) => {
    const schema = byId.get(id);
    if (!schema) throw new SchemaError(`the page has no schema ${id}`, '');
    check(doc, schema, schema, null);
  };
}
