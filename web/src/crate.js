// data/ro-crate-metadata.json (RO-Crate 1.2, bundle/FORMAT.md "ro-crate-metadata.json") against
// the bag: a canonical flat graph with the RO-Crate 1.2 context, every local reference resolving;
// its File entities exactly the payload but the crate (environment.json, which varies between runs,
// may be left out or described without size and hash), with the bag's sha256 and size; the run
// reading protocol.json and resources.json's model and dataset files and producing every other
// file; the signer entity naming the bag's signer; the root's licence, publisher, contact and
// authors those of the signed predicate.

import { Failed } from './bag.js';
import { canonicalDoc, isCanonical, parseRaw } from './json.js';

const CONTEXT = 'https://w3id.org/ro/crate/1.2/context';
const PROFILE = 'https://w3id.org/ro/crate/1.2';
const DESCRIPTOR = 'ro-crate-metadata.json';
const ROOT = './';
const RUN = '#run';
const INPUTS = { model: '#input-model', dataset: '#input-dataset' };
const PROTOCOL = 'protocol.json';
const NO_LICENSE = '#license-not-stated';
const FINGERPRINT_PROPERTY = 'https://calibration-runs.example/terms/ed25519-public-key-sha256';
const MAY_OMIT_HASH = new Set(['environment.json']);
const MEDIA_TYPES = { '.json': 'application/json', '.parquet': 'application/vnd.apache.parquet', '.png': 'image/png', '.md': 'text/markdown' };
const ABSOLUTE = /^[A-Za-z][A-Za-z0-9+.-]*:/;
const DATE = /^\p{Nd}{4}-\p{Nd}{2}-\p{Nd}{2}$/u; // Python's \d is any decimal digit
const CRATE = 'data/ro-crate-metadata.json';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const own = (o, k) => (isObject(o) && Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined);
const isRef = (v) => isObject(v) && Object.keys(v).length === 1 && typeof own(v, '@id') === 'string';

/** The entity's @type as a list. */
const typesOf = (e) => {
  const t = own(e, '@type');
  return typeof t === 'string' ? [t] : Array.isArray(t) ? t : [];
};

/** The @ids of a property holding one reference or a list of them. */
export const refs = (value) => (Array.isArray(value) ? value : [value]).filter(isRef).map((v) => v['@id']);

function* allRefs(value) {
  if (isRef(value)) yield value['@id'];
  else if (isObject(value)) for (const v of Object.values(value)) yield* allRefs(v);
  else if (Array.isArray(value)) for (const v of value) yield* allRefs(v);
}

function entity(graph, ident, kind) {
  const e = graph.get(ident);
  if (!e) throw new Failed(`the crate has no entity '${ident}'.`);
  if (!typesOf(e).includes(kind)) throw new Failed(`the crate's '${ident}' is a ${JSON.stringify(typesOf(e))}, not a ${kind}.`);
  return e;
}

/** [detail, graph (Map @id -> entity)] after the structural checks. */
export function parseCrate(data) {
  let doc = canonicalDoc(data);
  if (doc === null) {
    let raw;
    try {
      raw = parseRaw(data, CRATE);
    } catch (e) {
      throw new Failed(e.message);
    }
    if (!isCanonical(data, raw)) throw new Failed(`${CRATE} is valid JSON but not canonical; it was edited by hand.`);
    throw new Failed(`${CRATE} could not be read.`); // canonical yet not read by the fast path: never
  }
  if (!isObject(doc) || Object.keys(doc).sort().join() !== '@context,@graph') throw new Failed('the crate must be an object with exactly @context and @graph.');
  if (doc['@context'] !== CONTEXT) throw new Failed(`@context is ${JSON.stringify(doc['@context']).slice(0, 80)}, expected '${CONTEXT}'.`);
  const items = doc['@graph'];
  if (!Array.isArray(items) || !items.length) throw new Failed('@graph must be a non-empty list of entities.');
  const graph = new Map();
  items.forEach((e, n) => {
    if (!isObject(e) || typeof own(e, '@id') !== 'string' || !e['@id']) throw new Failed(`@graph[${n}] is not an entity with an @id.`);
    const t = own(e, '@type');
    if (!((typeof t === 'string' && t) || (Array.isArray(t) && t.length && t.every((x) => typeof x === 'string' && x)))) throw new Failed(`entity '${e['@id']}' has no valid @type.`);
    if (graph.has(e['@id'])) throw new Failed(`the @id '${e['@id']}' appears twice in @graph.`);
    graph.set(e['@id'], e);
  });
  const descriptor = entity(graph, DESCRIPTOR, 'CreativeWork');
  if (!refs(own(descriptor, 'conformsTo')).includes(PROFILE)) throw new Failed(`the metadata descriptor does not conform to ${PROFILE}.`);
  const about = refs(own(descriptor, 'about'));
  if (about.length !== 1 || about[0] !== ROOT) throw new Failed("the metadata descriptor is not about the root './'.");
  const root = entity(graph, ROOT, 'Dataset');
  for (const key of ['name', 'description']) if (typeof own(root, key) !== 'string' || !root[key]) throw new Failed(`the root has no ${key}.`);
  if (typeof own(root, 'datePublished') !== 'string' || !DATE.test(root.datePublished)) throw new Failed('the root\'s datePublished is not YYYY-MM-DD.');
  if (!refs(own(root, 'license')).length) throw new Failed('the root names no license entity.');
  const dangling = new Set();
  for (const e of graph.values()) {
    for (const [k, v] of Object.entries(e)) {
      if (k === '@id') continue;
      for (const r of allRefs(v)) if (!graph.has(r) && !ABSOLUTE.test(r)) dangling.add(r);
    }
  }
  if (dangling.size) throw new Failed(`the crate refers to ${JSON.stringify([...dangling].sort().slice(0, 5))}, which are not entities of @graph.`);
  return [`RO-Crate 1.2 context, ${graph.size} entities, every local reference resolves`, graph];
}

/** File entities = the payload but the crate, with the bag's sha256 and size, reachable through hasPart. */
export function checkFiles(graph, files, sha) {
  const payload = new Set([...files.keys()].filter((p) => p !== CRATE).map((p) => p.slice('data/'.length)));
  const described = new Set([...graph].filter(([, e]) => typesOf(e).includes('File')).map(([i]) => i));
  const problems = [];
  const extra = [...described].filter((p) => !payload.has(p)).sort();
  if (extra.length) problems.push(`it describes files the bag lacks: ${JSON.stringify(extra.slice(0, 5))}`);
  const missing = [...payload].filter((p) => !described.has(p) && !MAY_OMIT_HASH.has(p)).sort();
  if (missing.length) problems.push(`it does not describe ${JSON.stringify(missing.slice(0, 5))}`);
  for (const rel of [...described].filter((p) => payload.has(p)).sort()) {
    const e = graph.get(rel);
    const data = files.get(`data/${rel}`);
    const dot = rel.lastIndexOf('.');
    const wantType = MEDIA_TYPES[`.${dot < 0 ? rel : rel.slice(dot + 1)}`] || 'application/octet-stream';
    if (own(e, 'encodingFormat') !== wantType) problems.push(`${rel}: encodingFormat ${JSON.stringify(own(e, 'encodingFormat'))}, expected '${wantType}'`);
    if (MAY_OMIT_HASH.has(rel) && own(e, 'sha256') === undefined && own(e, 'contentSize') === undefined) continue;
    if (own(e, 'sha256') !== sha.get(`data/${rel}`)) problems.push(`${rel}: sha256 is not the file's`);
    if (own(e, 'contentSize') !== String(data.length)) problems.push(`${rel}: contentSize ${JSON.stringify(own(e, 'contentSize'))}, the file has ${data.length} bytes`);
  }
  const reached = new Set();
  const todo = [ROOT];
  while (todo.length) {
    const ident = todo.pop();
    if (reached.has(ident) || !graph.has(ident)) continue;
    reached.add(ident);
    todo.push(...refs(own(graph.get(ident), 'hasPart')));
  }
  const unreached = [...described].filter((p) => !reached.has(p)).sort();
  if (unreached.length) problems.push(`${JSON.stringify(unreached.slice(0, 5))} are not parts of the root (hasPart)`);
  if (problems.length) throw new Failed(`the crate does not describe the payload: ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? ` (+${problems.length - 3} more)` : ''}.`);
  const left = [...payload].filter((p) => !described.has(p)).sort();
  const hashed = [...described].filter((p) => !MAY_OMIT_HASH.has(p)).length;
  return `${described.size} File entities = the payload without the crate${left.length ? ` and ${left.join(', ')}` : ''}; sha256 and size of ${hashed} match the bag`;
}

/** #run reads protocol.json and the resources, produces every other file; its software names the environment's commit and image. */
export function checkRun(graph, payload, resources, environment) {
  const run = entity(graph, RUN, 'CreateAction');
  const problems = [];
  const objects = refs(own(run, 'object'));
  const wantObjects = [PROTOCOL, ...Object.values(INPUTS)];
  if (JSON.stringify([...objects].sort()) !== JSON.stringify([...wantObjects].sort()) || objects.length !== 3) problems.push(`#run reads ${JSON.stringify(objects)}, expected ${JSON.stringify(wantObjects)}`);
  const results = new Set(refs(own(run, 'result')));
  const want = new Set(payload.map((p) => p.slice('data/'.length)).filter((p) => p !== PROTOCOL && p !== DESCRIPTOR && !(MAY_OMIT_HASH.has(p) && !graph.has(p))));
  if (results.size !== want.size || [...want].some((p) => !results.has(p))) problems.push('#run produced files differ from the payload');
  for (const [kind, ident] of Object.entries(INPUTS)) {
    const repo = resources[kind];
    const e = graph.get(ident);
    if (!e) {
      problems.push(`no entity ${ident}`);
      continue;
    }
    if (own(e, 'version') !== repo.revision || own(e, 'name') !== `${repo.repo_id}@${repo.revision}`) problems.push(`${ident} is not ${repo.repo_id}@${repo.revision}`);
    const parts = refs(own(e, 'hasPart')).map((i) => {
      const part = graph.get(i) || {};
      return JSON.stringify([own(part, 'name') ?? null, own(part, 'sha256') ?? null, own(part, 'contentSize') ?? null]);
    }).sort();
    const listed = repo.files.map((f) => JSON.stringify([f.path, f.sha256, String(f.size)])).sort();
    if (JSON.stringify(parts) !== JSON.stringify(listed)) problems.push(`${ident}'s parts (name, sha256, size) are not resources.json's ${kind} files`);
  }
  const software = refs(own(run, 'instrument')).filter((i) => graph.has(i)).map((i) => graph.get(i));
  if (software.length !== 1 || !typesOf(software[0]).includes('SoftwareApplication')) problems.push("#run's instrument is not one SoftwareApplication");
  else {
    for (const [key, prop] of [['git_commit', 'identifier'], ['image', 'additionalProperty']]) {
      const values = refs(own(software[0], prop)).filter((i) => graph.has(i)).map((i) => own(graph.get(i), 'value') ?? null);
      const recorded = own(environment, key);
      const expected = recorded ? [recorded] : [];
      if (values.length !== expected.length || values.some((v, k) => v !== expected[k])) problems.push(`the software's ${prop} is ${JSON.stringify(values)}, environment.json's ${key} is ${JSON.stringify(recorded ?? null)}`);
    }
  }
  if (problems.length) throw new Failed(`the crate's run does not match the payload: ${problems.slice(0, 3).join('; ')}.`);
  return "#run reads protocol.json and resources.json's model and dataset files, produces every other payload file";
}

/** The signer entity holds the bag's signer; datePublished is the Bagging-Date. */
export function checkSigner(graph, fingerprint, baggingDate) {
  const keys = [...graph.values()].filter((e) => own(e, 'propertyID') === FINGERPRINT_PROPERTY);
  if (keys.length !== 1) throw new Failed(`the crate has ${keys.length} signer key entities (propertyID ${FINGERPRINT_PROPERTY}), expected 1.`);
  const value = own(keys[0], 'value');
  if (value !== fingerprint) throw new Failed(`the crate names signer ${String(value).slice(0, 16)}…, the bag is signed by ${fingerprint.slice(0, 16)}….`);
  const root = graph.get(ROOT);
  if (!refs(own(root, 'mentions')).includes(keys[0]['@id'])) throw new Failed('the root does not mention the signer key entity.');
  if (root.datePublished !== baggingDate) throw new Failed(`datePublished '${root.datePublished}' is not the Bagging-Date '${baggingDate}'.`);
  return `signer ${fingerprint.slice(0, 16)}… as in the bag; datePublished ${root.datePublished}`;
}

function party(graph, ident) {
  const e = graph.get(ident) || {};
  const types = typesOf(e);
  if (!(types.includes('Person') || types.includes('Organization')) || typeof own(e, 'name') !== 'string') throw new Failed(`the crate's '${ident}' is not a Person or Organization with a name.`);
  return { name: e.name, id: ident.startsWith('#') ? null : ident };
}

/** The licence, publisher, authors and contact the root states, in the predicate's shape. */
function statedPublication(graph) {
  const root = graph.get(ROOT);
  const licenses = refs(own(root, 'license')).filter((i) => i !== NO_LICENSE);
  const publishers = refs(own(root, 'publisher'));
  if (licenses.length > 1 || publishers.length > 1) throw new Failed("the crate's root names more than one license or publisher.");
  let contact = null;
  if (publishers.length) {
    const points = refs(own(graph.get(publishers[0]) || {}, 'contactPoint'));
    const emails = points.filter((i) => typesOf(graph.get(i) || {}).includes('ContactPoint')).map((i) => own(graph.get(i), 'email') ?? null);
    if (emails.length !== points.length || emails.length > 1) throw new Failed("the publisher's contactPoint is not one ContactPoint entity with an email.");
    contact = emails.length ? emails[0] : null;
  }
  return {
    license: licenses.length ? licenses[0] : null,
    publisher: publishers.length ? party(graph, publishers[0]) : null,
    authors: refs(own(root, 'author')).map((i) => party(graph, i)),
    contact,
  };
}

/** Python's == on JSON values (1 == 1.0; key order ignored). */
export function same(a, b) {
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, k) => same(x, b[k]));
  if (isObject(a) || isObject(b)) {
    if (!isObject(a) || !isObject(b)) return false;
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
  }
  if (typeof a === 'boolean' || typeof b === 'boolean') return (typeof a === 'boolean' ? Number(a) : a) === (typeof b === 'boolean' ? Number(b) : b);
  return a === b;
}

/** The root's licence, publisher, contact and authors equal the signed predicate's. */
export function checkPublication(graph, signed) {
  const stated = statedPublication(graph);
  if (!same(stated, signed === undefined ? null : signed)) {
    const diffs = Object.keys(stated).filter((k) => !isObject(signed) || !same(own(signed, k) ?? null, stated[k]));
    throw new Failed(`the crate states ${diffs.length ? JSON.stringify(diffs) : 'a publication'} other than the signed predicate.`);
  }
  const who = stated.publisher ? stated.publisher.name : 'no publisher';
  return `license ${stated.license || 'not stated'}, ${who}, ${stated.authors.length} author(s) as signed`;
}
