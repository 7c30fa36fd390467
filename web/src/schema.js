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
 * violation. Objects are plain objects (json.plain), whose keys never include a prototype's. Each
 * schema node is turned once into a closure of the steps its keywords call for (in a fixed order,
 * so the first violation reported is always the same): a pools.json of 100,000 entries is checked
 * without looking its keywords up again for every value. */
export function makeValidator(schemas) {
  const byId = new Map(schemas.map((s) => [s.$id, s]));
  const resolve = (ref, root) => {
    if (ref.startsWith('#/$defs/')) return [root.$defs[ref.slice(8)], root];
    const target = byId.get(ref);
    if (!target) throw new SchemaError(`the schema reference ${ref} is unknown`, '');
    return [target, target];
  };
  const compiled = new Map(); // root -> Map(schema node -> check)
  const compile = (s, root) => {
    if (!compiled.has(root)) compiled.set(root, new Map());
    const cache = compiled.get(root);
    if (cache.has(s)) return cache.get(s);
    let fn;
    cache.set(s, (v, path) => fn(v, path)); // a $ref cycle reaches the node before it is built
    fn = build(s, root);
    cache.set(s, fn);
    return fn;
  };
  const fail = (path, why) => {
    throw new SchemaError(`at ${pointerOf(path) || '/'}: ${why}`, pointerOf(path));
  };
  const matches = (check, v, path) => {
    try {
      check(v, path);
      return true;
    } catch (e) {
      if (!(e instanceof SchemaError)) throw e;
      return false;
    }
  };
  const build = (s, root) => {
    if (s === true) return () => {};
    if (s === false) return (v, path) => fail(path, 'no value is allowed here');
    const steps = [];
    if (s.$ref) {
      let target = null;
      steps.push((v, path) => {
        if (!target) {
          const [t, r] = resolve(s.$ref, root);
          target = compile(t, r);
        }
        target(v, path);
      });
    }
    if ('type' in s) {
      const types = Array.isArray(s.type) ? s.type : [s.type];
      steps.push((v, path) => {
        if (!types.some((t) => hasType(v, t))) fail(path, `${JSON.stringify(v)?.slice(0, 60)} is not of type ${types.join(' or ')}`);
      });
    }
    if ('const' in s) steps.push((v, path) => { if (!equal(v, s.const)) fail(path, `${JSON.stringify(v)?.slice(0, 60)} is not ${JSON.stringify(s.const)}`); });
    if ('enum' in s) steps.push((v, path) => { if (!s.enum.some((e) => equal(v, e))) fail(path, `${JSON.stringify(v)?.slice(0, 60)} is not one of ${JSON.stringify(s.enum).slice(0, 120)}`); });
    if (['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'].some((k) => k in s)) {
      steps.push((v, path) => {
        if (typeof v !== 'number') return;
        if ('minimum' in s && v < s.minimum) fail(path, `${v} is less than ${s.minimum}`);
        if ('maximum' in s && v > s.maximum) fail(path, `${v} is greater than ${s.maximum}`);
        if ('exclusiveMinimum' in s && v <= s.exclusiveMinimum) fail(path, `${v} is not above ${s.exclusiveMinimum}`);
        if ('exclusiveMaximum' in s && v >= s.exclusiveMaximum) fail(path, `${v} is not below ${s.exclusiveMaximum}`);
      });
    }
    if (['minLength', 'maxLength', 'pattern'].some((k) => k in s)) {
      const pattern = 'pattern' in s ? regex(s.pattern) : null;
      steps.push((v, path) => {
        if (typeof v !== 'string') return;
        const len = codePoints(v);
        if ('minLength' in s && len < s.minLength) fail(path, 'the string is too short');
        if ('maxLength' in s && len > s.maxLength) fail(path, 'the string is too long');
        if (pattern && !pattern.test(v)) fail(path, `${JSON.stringify(v).slice(0, 60)} does not match ${s.pattern}`);
      });
    }
    if (['minItems', 'maxItems', 'uniqueItems', 'prefixItems', 'items'].some((k) => k in s)) {
      const prefix = (s.prefixItems || []).map((p) => compile(p, root));
      const items = 'items' in s ? compile(s.items, root) : null;
      steps.push((v, path) => {
        if (!Array.isArray(v)) return;
        if ('minItems' in s && v.length < s.minItems) fail(path, `${v.length} items, fewer than ${s.minItems}`);
        if ('maxItems' in s && v.length > s.maxItems) fail(path, `${v.length} items, more than ${s.maxItems}`);
        if (s.uniqueItems) {
          for (let a = 0; a < v.length; a++) for (let b = a + 1; b < v.length; b++) if (equal(v[a], v[b])) fail(path, 'items are not unique');
        }
        for (let k = 0; k < v.length; k++) {
          if (k < prefix.length) prefix[k](v[k], down(path, k));
          else if (items) items(v[k], down(path, k));
        }
      });
    }
    const objectKeys = ['minProperties', 'maxProperties', 'required', 'properties', 'propertyNames', 'additionalProperties'];
    if (objectKeys.some((k) => k in s)) {
      const props = new Map(Object.entries(s.properties || {}).map(([k, p]) => [k, compile(p, root)]));
      const names = s.propertyNames ? compile(s.propertyNames, root) : null;
      const closed = s.additionalProperties === false;
      const extra = 'additionalProperties' in s && !closed ? compile(s.additionalProperties, root) : null;
      const required = s.required || [];
      steps.push((v, path) => {
        if (typeOf(v) !== 'object') return;
        const keys = Object.keys(v);
        if ('minProperties' in s && keys.length < s.minProperties) fail(path, 'too few properties');
        if ('maxProperties' in s && keys.length > s.maxProperties) fail(path, 'too many properties');
        for (const r of required) if (!Object.prototype.hasOwnProperty.call(v, r)) fail(path, `'${r}' is a required property`);
        for (const k of keys) {
          if (names) names(k, down(path, k));
          const check = props.get(k);
          if (check) check(v[k], down(path, k));
          else if (closed) fail(path, `'${k}' was unexpected`);
          else if (extra) extra(v[k], down(path, k));
        }
      });
    }
    if (s.oneOf) {
      const alts = s.oneOf.map((a) => compile(a, root));
      steps.push((v, path) => {
        const matched = alts.filter((alt) => matches(alt, v, path)).length;
        if (matched !== 1) fail(path, `${matched} of the oneOf alternatives match, not exactly one`);
      });
    }
    if (s.anyOf) {
      const alts = s.anyOf.map((a) => compile(a, root));
      steps.push((v, path) => { if (!alts.some((alt) => matches(alt, v, path))) fail(path, 'none of the anyOf alternatives matches'); });
    }
    if (steps.length === 1) return steps[0];
    return (v, path) => {
      for (let k = 0; k < steps.length; k++) steps[k](v, path);
    };
  };
  return (doc, id) => {
    const schema = byId.get(id);
    if (!schema) throw new SchemaError(`the page has no schema ${id}`, '');
    compile(schema, schema)(doc, null);
  };
}
