// The page's check table: the Python verifier's check ids and titles (verify/README.md), in its
// order, each with this page's own check or none. A check the page does not perform is listed as
// "not checked here: run the Python verifier", never as passed. As in the Python verifier, the
// bag is authenticated first (tag files, manifests, digests, signature, subjects, trusted key)
// and once one of those checks fails every later check is skipped unread.

import * as bag from './bag.js';
import { applyCaps, dimensions } from './caps.js';
import { sha256, sha256Sync } from './digest.js';
import { canonicalDoc, isCanonical, parseRaw, plain, Num } from './json.js';
import { bisect, firstArgmax, gradient, metricSet, meanNll } from './numerics.js';
import { readPool } from './predictions.js';
import { makeValidator, SchemaError } from './schema.js';
import { parseEnvelope, parseStatement, readPublicKey, signatureBy } from './signature.js';
import { expectedBounds } from './bounds.js';
import { checkReport } from './report.js';
import { checkFiles, checkPublication, checkRun, checkSigner, parseCrate, same as pyEqual } from './crate.js';
import { counts, expectedClassWarnings, expectedRecord, checkPermutation, pct } from './perclass.js';
import SCHEMAS, { FORMAT_DIGESTS, SCHEMA_SHA256 } from './schemas.generated.js';
import { checkClaims } from './claims.js';
import { BootstrapScorer, IndicesHasher, intervalVerdict, pairedBootstrap, quantileLinear } from './bootstrap.js';
import { checkAuditTemperature, checkBatchOwners } from './cluster.js';
import { checkLabelMap } from './labelmap.js';
import { entryProblem, expectedRecord as expectedEstimators } from './estimators.js';
import { ResampleMatrix } from './resamples.js';

export const NOT_HERE = 'not checked here: run the Python verifier';
export const VERDICTS = {
  verified: 'VERIFIED: every check passed and the bundle is signed by the trusted key.',
  'intact-signer-unknown': 'INTEGRITY HOLDS, SIGNER NOT ESTABLISHED: every check passed, but no trusted key was given; pass --trusted-key PUB.pem or --trusted-fingerprint HEX.',
  failed: "REJECTED: at least one check failed; do not use this bundle's figures.",
};
/** When no check failed but some are not performed here, the page never claims the Python verdict:
 * it says how far it got, in the Python verifier's words for that part. */
export const PARTIAL = {
  verified: 'VERIFIED AS FAR AS THIS PAGE CHECKS: every check this page performs passed and the bundle is signed by the trusted key; the checks not performed here need the Python verifier (python -m verify).',
  'intact-signer-unknown': 'INTEGRITY HOLDS AS FAR AS THIS PAGE CHECKS, SIGNER NOT ESTABLISHED: every check this page performs passed, but no trusted key was given; paste the signer\'s public key or open the page with #fingerprint=HEX.',
};

/** Why a bag folder is checked only as far as a browser lets the page see it. */
export const FOLDER_LINKS = 'A browser gives this page the bytes a symbolic link in a chosen or dropped folder points to, never the link itself, so the page cannot refuse a bag that links to files outside it as the Python verifier does (bag.layout); a folder is never VERIFIED here: check the bundle\'s archive (bundle archive), which holds no links, or run the Python verifier on the folder.';

const POOLS = ['calibration', 'audit'];
const METRIC_TOL = 1e-9;
const REFIT_REL_TOL = 1e-6;
const PAYLOAD_SCHEMAS = [
  ['data/protocol.json', 'protocol'], ['data/resources.json', 'resources'], ['data/pools.json', 'pools'],
  ['data/temperature.json', 'temperature'], ['data/trajectory.json', 'trajectory'], ['data/metrics.json', 'metrics'],
  ['data/stages.json', 'stages'], ['data/environment.json', 'environment'], ['data/bootstrap.json', 'bootstrap'],
  ['data/stability.json', 'stability'],
];
const SECTION_FILES = { bootstrap: 'data/bootstrap.json', stability: 'data/stability.json' };
const PAYLOAD_FILES = [
  'data/environment.json', 'data/figures/confidence-audit.png', 'data/figures/reliability-audit.png', 'data/metrics.json',
  'data/pools.json', 'data/predictions/audit.parquet', 'data/predictions/calibration.parquet', 'data/protocol.json',
  'data/report.md', 'data/resources.json', 'data/ro-crate-metadata.json', 'data/stages.json', 'data/temperature.json',
  'data/trajectory.json',
];
const schemaId = (name) => `https://calibration-runs.example/schemas/${name}/v1`;
const validate = makeValidator(SCHEMAS);

/** A check could not run: a fact it needs was not established (the runner reports a skip). */
class Skip extends Error {}

/** The context the checks share: the bag, the trust, and what earlier checks established. */
class Context {
  constructor(input, trust) {
    this.input = input; // {kind: 'archive'|'folder', bag?, failure?, detail?}
    this.trust = trust; // {keys: [{key, raw, fingerprint, source}], threshold, fingerprint}
    this.bag = input.bag || null;
    this.notes = [];
    this.docs = new Map();
    this.raw = new Map();
    this.tables = new Map();
    this.figures = {};
    this.sharedBootstrap = null; // bootstrap.intervals' figures, when metrics.estimators drew its matrix
  }

  doc(path) {
    if (!this.docs.has(path)) throw new Skip(`skipped: ${path} was not read (its json check did not pass)`);
    return this.docs.get(path);
  }

  table(pool) {
    if (!this.tables.has(pool)) throw new Skip(`skipped: the ${pool} predictions were not read (predictions.${pool}.columns did not pass)`);
    return this.tables.get(pool);
  }

  /** The parseRaw result of a JSON record that passed its json check (numbers keep their tokens). */
  rawOf(path) {
    this.doc(path);
    if (!this.raw.has(path)) this.raw.set(path, parseRaw(this.bag.files.get(path), path));
    return this.raw.get(path);
  }

  need(value, what) {
    if (value === undefined || value === null) throw new Skip(`skipped: ${what} was not established`);
    return value;
  }

  /** sha256 of a file in the bag, computed once (several records name the same files). */
  sha(path) {
    this.shas ||= new Map();
    if (!this.shas.has(path)) this.shas.set(path, sha256(this.bag.files.get(path)));
    return this.shas.get(path);
  }
}

// -- authentication -----------------------------------------------------------------------------

function archiveSafe(ctx) {
  if (ctx.input.failure) throw new bag.Failed(ctx.input.failure);
  return ctx.input.detail;
}

function layoutCheck(ctx) {
  if (!ctx.bag) throw new bag.Failed(ctx.input.failure || 'the bag could not be read.');
  const detail = bag.layout(ctx.bag, ctx.notes);
  return ctx.input.kind === 'folder' ? `${detail}; symbolic links in a folder are not visible to a browser (not checked here)` : detail;
}

async function manifestSha256(ctx) {
  const { detail, entries } = await bag.manifest(ctx.bag, bag.TAG.sha256, 'sha256');
  ctx.manifest = entries;
  // every file now hashes to its manifest line: later checks take the digest from there
  ctx.shas ||= new Map();
  for (const [path, digest] of entries) ctx.shas.set(path, Promise.resolve(digest));
  return detail;
}

async function manifestOther(ctx) {
  const others = [...bag.manifests(ctx.bag, false)].filter(([n]) => n !== bag.TAG.sha256 && n !== bag.TAG.sha512);
  if (others.some(([, alg]) => !bag.algorithmOf(alg))) return null; // an algorithm WebCrypto lacks
  for (const [name, alg] of others) await bag.manifest(ctx.bag, name, alg);
  return others.length ? `${others.length} other payload manifests match` : 'no other payload manifests';
}

function infoCheck(ctx) {
  const { detail, info } = bag.info(ctx.bag, ctx.notes);
  ctx.info = info;
  return detail;
}

function envelopeCheck(ctx) {
  const data = ctx.bag.files.get(bag.TAG.provenance);
  if (!data) throw new bag.Failed(`the bundle is unsigned: ${bag.TAG.provenance} is missing, so nothing ties the payload to a signer.`);
  let doc;
  try {
    doc = plain(parseRaw(data, bag.TAG.provenance));
  } catch (e) {
    throw new bag.Failed(e.message);
  }
  ctx.envelope = parseEnvelope(doc, bag.TAG.provenance);
  schemaCheck(doc, 'envelope', bag.TAG.provenance);
  const count = ctx.envelope.signatures.length;
  return `DSSE envelope, payloadType ${ctx.envelope.payloadType}, ${count} signature${count > 1 ? 's' : ''}`;
}

async function validCheck(ctx) {
  const env = ctx.need(ctx.envelope, 'the envelope');
  const pem = ctx.bag.files.get(bag.TAG.signer);
  if (!pem) throw new bag.Failed(`${bag.TAG.signer} is missing; the signer's key is not in the bag.`);
  const key = await readPublicKey(new TextDecoder().decode(pem), bag.TAG.signer);
  const named = (ctx.info || {})['Signer-Fingerprint'];
  if (named !== undefined && named !== key.fingerprint) throw new bag.Failed(`bag-info.txt names signer ${named.slice(0, 16)}…, the signing key is ${key.fingerprint.slice(0, 16)}….`);
  if ((await signatureBy(env, key)) < 0) throw new bag.Failed(`the DSSE signature does not verify under ${bag.TAG.signer} (fingerprint ${key.fingerprint.slice(0, 16)}…); the statement or the signature was changed after signing, or the key was replaced.`);
  const { statement, digests } = parseStatement(env.payload);
  ctx.statement = statement;
  ctx.subjects = digests;
  ctx.signer = key;
  return `Ed25519 signature valid, signer fingerprint ${key.fingerprint}`;
}

function formatVersion(ctx) {
  const statement = ctx.need(ctx.statement, 'the signed statement');
  const fmt = statement.predicate.format;
  if (!fmt || typeof fmt !== 'object' || !Number.isInteger(fmt.version) || typeof fmt.oldest_verifier !== 'string') {
    throw new bag.Failed('the signed predicate states no format version (format.version and format.oldest_verifier).');
  }
  if (![1, 2].includes(fmt.version)) throw new bag.Failed(`this bundle is format ${fmt.version}, which this page does not read (it reads format 1, 2); run the Python verifier.`);
  return `format ${fmt.version}`;
}

async function subjectsCheck(ctx) {
  const subjects = ctx.need(ctx.subjects, 'the signed statement');
  const manifest = ctx.need(ctx.manifest, 'the manifest');
  const signed = [...subjects.keys()];
  const missing = [...manifest.keys()].filter((p) => !subjects.has(p)).sort();
  const extra = signed.filter((p) => !manifest.has(p)).sort();
  if (missing.length || extra.length) throw new bag.Failed(`the signed subjects differ from manifest-sha256.txt: not signed ${JSON.stringify(missing.slice(0, 5))}, signed but not in the bag ${JSON.stringify(extra.slice(0, 5))}.`);
  let others = 0;
  for (const name of signed.sort()) {
    const d = subjects.get(name);
    const file = ctx.bag.files.get(name);
    const actual = file ? await ctx.sha(name) : 'missing';
    if (d.sha256 !== manifest.get(name) || d.sha256 !== actual) throw new bag.Failed(`sha256 mismatch for '${name}': the signed statement says ${d.sha256.slice(0, 16)}…, the file ${actual.slice(0, 16)}…; the payload was changed after signing.`);
    for (const [alg, value] of Object.entries(d).sort()) {
      if (alg === 'sha256') continue;
      const algorithm = bag.algorithmOf(alg);
      if (!algorithm) return null; // a digest WebCrypto cannot compute: the Python verifier checks it
      const { sha } = await import('./digest.js');
      if ((await sha(algorithm, file)) !== value) throw new bag.Failed(`${alg} mismatch for '${name}': the payload was changed after signing.`);
      others++;
    }
  }
  return `${signed.length} subjects, equal to the manifest and to the files${others ? `, and ${others} other signed digests` : ''}`;
}

async function trustedCheck(ctx) {
  const env = ctx.need(ctx.envelope, 'the envelope');
  const signer = ctx.need(ctx.signer, 'the signer');
  const { keys, threshold, fingerprint } = ctx.trust;
  if (keys.length) {
    const trusted = new Set();
    for (const key of keys) if ((await signatureBy(env, key)) >= 0) trusted.add(key.fingerprint);
    if (trusted.size >= threshold) return `signed by ${trusted.size} trusted key(s), ${threshold} required`;
    throw new bag.Failed(`signed by ${signer.fingerprint.slice(0, 16)}…, not by the trusted key(s): ${trusted.size} of the ${threshold} required trusted signatures verify; the bundle was re-signed by someone else, or a required signature is missing.`);
  }
  if (fingerprint) {
    if (fingerprint !== signer.fingerprint) throw new bag.Failed(`signed by ${signer.fingerprint.slice(0, 16)}…, not by the trusted fingerprint ${fingerprint.slice(0, 16)}…; the bundle was re-signed by someone else.`);
    return `signer has the trusted fingerprint ${fingerprint.slice(0, 16)}…`;
  }
  throw new Skip(`no trusted key given: the bundle is intact and signed by ${signer.fingerprint.slice(0, 16)}…, but whose key that is is not established; give the signer's public key`);
}

// -- content ------------------------------------------------------------------------------------

function schemaCheck(doc, name, source) {
  try {
    validate(doc, schemaId(name));
  } catch (e) {
    if (e instanceof SchemaError) throw new bag.Failed(`${source} does not follow the schema ${schemaId(name)} ${e.message}.`);
    throw e;
  }
}

function expectedPayload(ctx) {
  const raw = ctx.bag.files.get('data/protocol.json');
  if (!raw) return PAYLOAD_FILES;
  const protocol = plain(parseRaw(raw, 'data/protocol.json'));
  if (!protocol || typeof protocol !== 'object' || Array.isArray(protocol)) throw new bag.Failed('data/protocol.json is not a JSON object.');
  return [...PAYLOAD_FILES, ...Object.entries(SECTION_FILES).filter(([s]) => s in protocol).map(([, p]) => p)].sort();
}

function payloadFiles(ctx) {
  const found = new Set(bag.payload(ctx.bag));
  let expected;
  try {
    expected = new Set(expectedPayload(ctx));
  } catch (e) {
    throw new bag.Failed(`the expected payload depends on the protocol, which cannot be read: ${e.message}`);
  }
  const missing = [...expected].filter((p) => !found.has(p)).sort();
  const extra = [...found].filter((p) => !expected.has(p)).sort();
  const empty = [...ctx.bag.dirs].filter((d) => d.startsWith('data/') && ![...found].some((p) => p.startsWith(`${d}/`))).sort();
  if (missing.length || extra.length || empty.length) throw new bag.Failed(`data/ does not hold exactly the format's payload: missing ${JSON.stringify(missing)}, extra ${JSON.stringify(extra)}, empty folders ${JSON.stringify(empty)}.`);
  return `exactly the ${expected.size} payload files the format requires for this protocol`;
}

function jsonFiles(ctx) {
  if (!ctx.bag) return []; // an archive that could not be read: no bag, no payload to name
  let expected;
  try {
    expected = new Set(ctx.bag && ctx.bag.files.size ? expectedPayload(ctx) : PAYLOAD_FILES);
  } catch {
    expected = new Set(PAYLOAD_FILES);
  }
  return PAYLOAD_SCHEMAS.filter(([p]) => expected.has(p) || (ctx.bag && ctx.bag.files.has(p))).map(([path, name]) => ({ path, name }));
}

function jsonFile(ctx, { path, name }) {
  const data = ctx.bag.files.get(path);
  if (!data) throw new bag.Failed(`${path} is missing.`);
  const canonical = path !== 'data/protocol.json';
  // A canonical record is read by the fast path; anything else by the strict parser, which says what is wrong.
  let doc = canonical ? canonicalDoc(data) : null;
  if (doc === null) {
    let raw;
    try {
      raw = parseRaw(data, path);
    } catch (e) {
      throw new bag.Failed(e.message);
    }
    if (canonical && !isCanonical(data, raw)) throw new bag.Failed(`${path} is valid JSON but not canonical (sorted keys, no spaces, floats as repr, one trailing newline); it was edited by hand.`);
    doc = plain(raw);
    ctx.raw.set(path, raw);
  }
  schemaCheck(doc, name, path);
  ctx.docs.set(path, doc);
  return `${canonical ? 'canonical, ' : 'strict JSON, '}valid against ${schemaId(name)}`;
}

function statementCheck(ctx) {
  const statement = ctx.need(ctx.statement, 'the signed statement');
  schemaCheck(statement, 'statement', 'the signed statement');
  ctx.docs.set('predicate', statement.predicate);
  return `valid against ${schemaId('statement')} and ${schemaId('predicate')}`;
}

/** (file, dotted field) that a format requires and earlier formats lack (their schemas keep them optional). */
const REQUIRED_SINCE = {
  2: [['data/environment.json', 'arithmetic'], ['data/environment.json', 'threads'], ['data/metrics.json', 'truncation'],
    ['data/metrics.json', 'warnings'], ['data/resources.json', 'model.revision_checked_by_hub'], ['data/resources.json', 'dataset.revision_checked_by_hub']],
};

/** Every record holds the fields its format requires. */
function formatFields(ctx) {
  const version = ctx.need(ctx.statement, 'the signed statement').predicate.format.version;
  const wanted = Object.entries(REQUIRED_SINCE).filter(([since]) => Number(since) <= version).flatMap(([, pairs]) => pairs);
  const has = (doc, dotted) => dotted.split('.').every((part) => {
    const here = doc && typeof doc === 'object' && !Array.isArray(doc) && Object.prototype.hasOwnProperty.call(doc, part);
    doc = here ? doc[part] : undefined;
    return here;
  });
  const missing = wanted.filter(([path, field]) => !has(ctx.doc(path), field)).map(([path, field]) => `${path} ${field}`);
  if (missing.length) throw new bag.Failed(`this format-${version} bundle lacks fields its format requires: ${missing.join(', ')}.`);
  return wanted.length ? `the ${wanted.length} fields format ${version} added are present` : 'no fields to add';
}

/** The protocol's sizes (caps.dimensions) once data/protocol.json was read, or null beyond the bounds. */
function protocolDims(ctx, protocol) {
  return protocol ? dimensions(ctx.bag.files.get('data/protocol.json')) : null;
}

function protocolBounds(ctx) {
  const dims = protocolDims(ctx, ctx.doc('data/protocol.json'));
  if (!dims) throw new bag.Failed("the protocol's sizes are beyond the verifier's bounds (FORMAT.md, Limits); the verifier refuses a bundle it cannot check in bounded time and memory.");
  return `${dims.rows.toLocaleString('en-US')} rows, ${dims.classes} classes, ${dims.steps} steps: within the verifier's bounds`;
}

async function protocolHash(ctx) {
  const sha = await ctx.sha('data/protocol.json');
  const named = [['bag-info.txt Protocol-SHA256', ctx.need(ctx.info, 'bag-info.txt')['Protocol-SHA256']]];
  for (const path of ['data/pools.json', 'data/temperature.json', 'data/trajectory.json', 'data/metrics.json', 'data/stages.json']) {
    named.push([`${path} protocol_sha256`, ctx.doc(path).protocol_sha256]);
  }
  for (const path of Object.values(SECTION_FILES)) {
    if (ctx.docs.has(path) || ctx.bag.files.has(path)) named.push([`${path} protocol_sha256`, ctx.doc(path).protocol_sha256]);
  }
  for (const stage of ctx.doc('data/stages.json').stages) named.push([`stages.json stage '${stage.name}'`, stage.protocol_sha256]);
  named.push(['the signed predicate', ctx.doc('predicate').protocol_sha256]);
  const wrong = named.filter(([, v]) => v !== sha).map(([where]) => where);
  if (wrong.length) throw new bag.Failed(`data/protocol.json hashes to ${sha.slice(0, 16)}…, but ${wrong.slice(0, 5).join(', ')} name${wrong.length === 1 ? 's' : ''} another protocol.`);
  return `${named.length} records name the protocol in the bag (sha256 ${sha.slice(0, 16)}…)`;
}

/** Which forward ran and why (environment.json `forward_choice`), against its forward_check: the
 * packed forward always comes with its check, transformers' forward only as a stated fallback. */
function forwardCheck(ctx) {
  const environment = ctx.doc('data/environment.json');
  const choice = environment.forward_choice;
  const checked = 'forward_check' in environment;
  if (choice.name === 'packed-distilbert' && !checked) throw new bag.Failed('environment.json says the packed forward ran but holds no forward_check; every run of that forward checks it against transformers\' forward.');
  if (choice.name === 'transformers') {
    if (checked) throw new bag.Failed('environment.json says transformers\' forward ran but holds a forward_check of the packed forward.');
    if (!choice.reason.startsWith('fallback: ')) throw new bag.Failed(`environment.json's forward_choice names transformers' forward with the reason '${choice.reason}', which does not start with 'fallback: '.`);
  }
  return `${choice.name} (${choice.reason})`;
}

const FORMAL_UNPINNED_PINS = ['hub-lfs', 'first-use'];

/** Why a used file keeps a run from being formal (not the protocol's file, not pinned its way, not matching). */
function formalPinProblems(kind, path, f, pin) {
  if (pin === null) return [`${kind} file '${path}' is not a file the protocol lists at its revision`];
  const allowed = pin.sha256 !== null ? ['protocol'] : FORMAL_UNPINNED_PINS;
  if (!allowed.includes(f.pin)) return [`${kind} file '${path}' is pinned '${f.pin}', a formal run pins it by ${allowed.join(' or ')}`];
  if (!f.matches_pin || f.pinned_sha256 === null) return [`${kind} file '${path}' does not match its pin`];
  return [];
}

/** The profile, the resources against the protocol's pins, the pools' dataset hash. */
function resourcePins(ctx) {
  const info = ctx.need(ctx.info, 'bag-info.txt');
  const resources = ctx.doc('data/resources.json');
  const protocol = ctx.doc('data/protocol.json');
  const poolsDataset = ctx.doc('data/pools.json').dataset_sha256;
  const eq = pyEqual;
  if (!eq(resources.profile, info.Profile)) throw new bag.Failed(`bag-info.txt says Profile '${info.Profile}', resources.json says '${resources.profile}'.`);
  const formal = [];
  for (const kind of ['model', 'dataset']) {
    const used = resources[kind];
    const pinned = protocol.resources[kind];
    if ('revision_checked_by_hub' in used && !eq(used.revision_checked_by_hub, used.source === 'hub')) throw new bag.Failed(`resources.json says the ${kind} revision was checked by a hub ${used.revision_checked_by_hub}, but its source is '${used.source}'; only files from the hub are checked at their revision.`);
    if (!eq(used.repo_id, pinned.repo_id) || !eq(used.repo_type, pinned.repo_type)) formal.push(`${kind} is '${used.repo_id}', the protocol pins '${pinned.repo_id}'`);
    if (!eq(used.revision, pinned.revision)) formal.push(`${kind} revision ${String(used.revision).slice(0, 12)} is not the pinned ${String(pinned.revision).slice(0, 12)}`);
    const pins = new Map(pinned.files.map((f) => [f.path, f]));
    const files = new Map(used.files.map((f) => [f.path, f]));
    if (files.size !== used.files.length) throw new bag.Failed(`resources.json lists a ${kind} file twice.`);
    const sameRepo = eq(used.repo_id, pinned.repo_id) && eq(used.revision, pinned.revision);
    for (const [path, f] of files) {
      const pin = sameRepo && pins.has(path) ? pins.get(path) : null;
      if (pin !== null && pin.sha256 !== null && (f.pin !== 'protocol' || !eq(f.pinned_sha256, pin.sha256))) throw new bag.Failed(`resources.json ${kind} file '${path}' records pin '${f.pin}' ${String(f.pinned_sha256).slice(0, 16)}…, the protocol pins ${String(pin.sha256).slice(0, 16)}….`);
      if (f.pinned_sha256 !== null && !eq(f.matches_pin, eq(f.sha256, f.pinned_sha256))) throw new bag.Failed(`resources.json ${kind} file '${path}' says matches_pin ${f.matches_pin}, but its sha256 and pin say otherwise.`);
      if (f.pinned_sha256 === null && f.matches_pin) throw new bag.Failed(`resources.json ${kind} file '${path}' matches_pin is true without a pin.`);
      formal.push(...formalPinProblems(kind, path, f, pin));
    }
    for (const [path, pin] of pins) {
      const f = files.get(path);
      if (f === undefined) formal.push(`${kind} file '${path}' is not listed`);
      else if (!eq(f.size, pin.size) || (pin.sha256 !== null && !eq(f.sha256, pin.sha256))) formal.push(`${kind} file '${path}' differs from its pin`);
    }
  }
  if (!resources.dataset.files.some((f) => eq(f.sha256, poolsDataset))) throw new bag.Failed(`pools.json names dataset ${String(poolsDataset).slice(0, 16)}…, which is not a dataset file in resources.json.`);
  if (resources.profile === 'formal') {
    if (formal.length || resources.deviations.length) throw new bag.Failed(`the profile is 'formal' but ${formal.length ? formal[0] : 'deviations are listed'}; a formal run uses exactly the protocol's pinned files.`);
    return 'profile formal: every file is the protocol\'s pinned file at its revision';
  }
  if (!resources.deviations.length) throw new bag.Failed("the profile is 'other' but no deviation is given; each must be stated.");
  return `profile other, ${resources.deviations.length} deviation(s) stated; pins recorded consistently`;
}

const STAGE_ORDER = ['split', 'calibration-inference', 'fit', 'audit-inference', 'metrics'];

/** A time as Python's datetime.fromisoformat reads the schema's UTC form: microseconds since 1970
 * (digits past the sixth dropped), or Failed for a date or time that does not exist. */
function utcMicros(value, where) {
  const m = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(Z|\+00:00)$/.exec(value);
  const [year, month, day, hour, minute, second] = m ? m.slice(1, 7).map(Number) : [];
  const days = m ? new Date(Date.UTC(2000, month, 0)).getUTCDate() + (month === 2 && !(year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)) ? -1 : 0) : 0;
  if (!m || year < 1 || month < 1 || month > 12 || day < 1 || day > days || hour > 23 || minute > 59 || second > 59) {
    throw new bag.Failed(`${where} is '${String(value).slice(0, 40)}', not an ISO 8601 time.`);
  }
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  return date.getTime() * 1000 + Number((m[7] || '').padEnd(6, '0').slice(0, 6));
}

/** The environment's stage times: each ends after it starts; the five stages timed in order, one after the other. */
function stageTimes(times) {
  let previous = null;
  const order = [];
  times.forEach((record, i) => {
    const name = String(record.stage);
    const start = utcMicros(record.start, `environment.json stage_times[${i}] start`);
    const end = utcMicros(record.end, `environment.json stage_times[${i}] end`);
    if (end < start) throw new bag.Failed(`environment.json says stage '${name}' ended before it started.`);
    if (!STAGE_ORDER.includes(name)) return;
    if (previous && start < previous[1]) throw new bag.Failed(`environment.json says stage '${name}' started before stage '${previous[0]}' ended; the job runs them one after the other.`);
    previous = [name, end];
    order.push(name);
  });
  const expected = STAGE_ORDER.filter((n) => order.includes(n));
  if (JSON.stringify(order) !== JSON.stringify(expected)) throw new bag.Failed(`environment.json times the stages in the order ${JSON.stringify(order)}, expected ${JSON.stringify(STAGE_ORDER)}.`);
  return `${order.length} stage times in order`;
}

/** A path a record lists: relative, in normal form, no control characters or '%'. */
function safeBagPath(path, where) {
  if (!path || path.startsWith('/') || path.includes('\\') || path.split('/').some((part) => part === '' || part === '.' || part === '..')) {
    throw new bag.Failed(`${where} lists the path '${path}', which is absolute, empty or escapes the bag (., .., //, backslash); the manifest has been tampered with.`);
  }
  if (/[\x00-\x1f\x7f%]/.test(path)) throw new bag.Failed(`${where} lists the path '${path}', which holds a control character or '%'; the format never writes such names.`);
}

/** The five stages in order; what a stage consumed was produced before; recorded hashes equal the files. */
async function stagesRecords(ctx) {
  const { stages } = ctx.doc('data/stages.json');
  const names = stages.map((st) => st.name);
  if (JSON.stringify(names) !== JSON.stringify(STAGE_ORDER)) throw new bag.Failed(`stages.json lists ${JSON.stringify(names)}, expected ${JSON.stringify(STAGE_ORDER)} in that order.`);
  const producer = new Map();
  stages.forEach((st, i) => Object.values(st.produced).forEach((d) => { if (!producer.has(d)) producer.set(d, i); }));
  stages.forEach((st, i) => {
    for (const [path, digest] of Object.entries(st.consumed)) {
      if (producer.has(digest) && producer.get(digest) >= i) throw new bag.Failed(`stage '${st.name}' consumed ${path} ${digest.slice(0, 16)}…, which stage '${stages[producer.get(digest)].name}' produced only later.`);
    }
  });
  const environment = ctx.docs.get('data/environment.json');
  const times = environment ? stageTimes(environment.stage_times) : 'no stage times';
  let checked = 0;
  for (const st of stages) {
    for (const role of ['consumed', 'produced']) {
      for (const [path, digest] of Object.entries(st[role])) {
        safeBagPath(path, `stages.json ${st.name} ${role}`);
        if (path === 'stages.json') throw new bag.Failed(`stage '${st.name}' lists stages.json, which cannot hash itself.`);
        if (!ctx.bag.files.has(`data/${path}`)) continue;
        const actual = await ctx.sha(`data/${path}`);
        if (actual !== digest) throw new bag.Failed(`stage '${st.name}' ${role} ${path} with sha256 ${digest.slice(0, 16)}…, the file in the bag hashes to ${actual.slice(0, 16)}….`);
        checked++;
      }
    }
  }
  return `${names.length} stages in order; ${checked} recorded hashes equal the files; ${times}`;
}

/**
 * How the run's forwards used more than one thread (environment.json threads.layout), as the check
 * reports it; nothing for one thread or a record without a layout.
 */
function layoutText(t) {
  if (t.used === 1) return '';
  if (t.layout === 'batches') return `, ${t.used} batches at once, one thread each`;
  return t.layout === 'operators' ? ', one batch at a time' : '';
}

/** The run's torch threads against the protocol's bound (environment.json `threads`). */
function threadsCheck(ctx) {
  const environment = ctx.doc('data/environment.json');
  const bound = ctx.doc('data/protocol.json').inference.torch_threads;
  const t = environment.threads;
  const torch = environment.torch || {};
  const reported = Object.prototype.hasOwnProperty.call(torch, 'num_threads') ? torch.num_threads : null;
  if (t.protocol_bound !== bound) throw new bag.Failed(`environment.json says the protocol allowed ${t.protocol_bound} torch threads, but protocol.json's torch_threads is ${bound}.`);
  if (!(t.used >= 1 && t.used <= bound)) throw new bag.Failed(`environment.json says the run used ${t.used} torch threads, outside the protocol's 1..${bound}.`);
  if (reported !== t.used) throw new bag.Failed(`environment.json says the run chose ${t.used} torch threads, but torch reported ${reported}.`);
  if (t.chosen_by === 'physical cores') {
    const fallback = t.cpu_quota || t.physical_cores; // Python's `or`: a quota of 0 or null means none
    const expected = Math.min(bound, t.physical_cores, fallback);
    if (t.used !== expected) throw new bag.Failed(`environment.json says the run used ${t.used} torch threads for ${t.physical_cores} physical cores (quota ${t.cpu_quota}) under a bound of ${bound}; that rule gives ${expected}.`);
  }
  return `${t.used} of at most ${bound} torch threads (${t.chosen_by})${layoutText(t)}`;
}

/** Audit inference consumed the fit's temperature; nothing touched the audit pool before it. */
async function auditAfterFit(ctx) {
  const stages = ctx.doc('data/stages.json').stages;
  const [temperature, audit, calibration] = await Promise.all(['data/temperature.json', 'data/predictions/audit.parquet', 'data/predictions/calibration.parquet'].map((p) => ctx.sha(p)));
  const fitAt = stages.findIndex((s) => s.name === 'fit');
  const auditAt = stages.findIndex((s) => s.name === 'audit-inference');
  if (fitAt < 0 || auditAt < 0) throw new bag.Failed('stages.json lacks the fit or the audit-inference stage.');
  // the last stage of each name, as a mapping by name keeps it
  const last = (name) => stages.reduce((found, s, i) => (s.name === name ? i : found), -1);
  const [fitI, auditI] = [last('fit'), last('audit-inference')];
  const [fit, auditStage] = [stages[fitI], stages[auditI]];
  const own = (o, key) => (Object.prototype.hasOwnProperty.call(o, key) ? o[key] : undefined);
  if (own(fit.produced, 'temperature.json') !== temperature) throw new bag.Failed(`the fit stage does not record producing temperature.json with sha256 ${temperature.slice(0, 16)}….`);
  if (own(fit.consumed, 'predictions/calibration.parquet') !== calibration) throw new bag.Failed('the fit stage does not record consuming predictions/calibration.parquet as it is in the bag.');
  const named = own(auditStage.consumed, 'temperature.json');
  if (named !== temperature) throw new bag.Failed(`the audit-inference stage consumed temperature.json ${String(named === undefined ? 'None' : named).slice(0, 16)}…, but the frozen temperature in the bag hashes to ${temperature.slice(0, 16)}…; the audit did not run on this temperature.`);
  if (own(auditStage.produced, 'predictions/audit.parquet') !== audit) throw new bag.Failed('the audit-inference stage does not record producing predictions/audit.parquet as it is in the bag.');
  if (auditI < fitI) throw new bag.Failed('the audit-inference stage ran before the fit stage.');
  stages.forEach((stage, i) => {
    for (const role of ['consumed', 'produced']) {
      for (const [path, digest] of Object.entries(stage[role])) {
        if (i < auditI && path === 'predictions/audit.parquet') throw new bag.Failed(`stage '${stage.name}', before audit-inference, ${role} predictions/audit.parquet.`);
        if (i < auditI && digest === audit) throw new bag.Failed(`stage '${stage.name}', before audit-inference, ${role} the audit predictions ${audit.slice(0, 16)}… under the name ${path}.`);
        if (i >= auditI && digest === audit && path !== 'predictions/audit.parquet') throw new bag.Failed(`stage '${stage.name}' ${role} the audit predictions ${audit.slice(0, 16)}… under another name, ${path}.`);
      }
    }
  });
  return `fit produced temperature.json ${temperature.slice(0, 12)}…, audit-inference consumed the same file and ran after it; nothing touched the audit pool before`;
}

function splitKeys(ctx) {
  const pools = ctx.doc('data/pools.json');
  const protocol = ctx.doc('data/protocol.json');
  const { prefix } = protocol.split;
  if (pools.prefix !== prefix) throw new bag.Failed(`pools.json prefix is '${pools.prefix}', the protocol's is '${prefix}'.`);
  let count = 0;
  const enc = new TextEncoder();
  for (const [name, entries] of Object.entries(pools.pools)) {
    entries.forEach((e, i) => {
      const key = sha256Sync(enc.encode(`${prefix}${e.idx}`));
      if (e.split_key !== key) throw new bag.Failed(`pool '${name}' entry ${i} (idx ${e.idx}) has split_key ${e.split_key.slice(0, 16)}…, sha256 of prefix + idx is ${key.slice(0, 16)}….`);
    });
    count += entries.length;
  }
  return `${count} split keys equal sha256('${prefix}' + idx)`;
}

function assignment(ctx) {
  const pools = ctx.doc('data/pools.json');
  const protocol = ctx.doc('data/protocol.json');
  const spec = protocol.split.pools.map((p) => [p.name, p.size]);
  const names = spec.map(([n]) => n);
  const same = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());
  if (!same(Object.keys(pools.pools), names) || !same(Object.keys(pools.sizes), names)) throw new bag.Failed(`pools.json holds other pools than the protocol names ${JSON.stringify(names)}.`);
  for (const [name, size] of spec) {
    const entries = pools.pools[name];
    if (pools.sizes[name] !== size || entries.length !== size) throw new bag.Failed(`pool '${name}' holds ${entries.length} entries and says size ${pools.sizes[name]}, the protocol fixes ${size}.`);
    for (let i = 1; i < entries.length; i++) if (entries[i - 1].split_key > entries[i].split_key) throw new bag.Failed(`pool '${name}' is not in ascending split key order.`);
  }
  const everything = names.flatMap((name) => pools.pools[name].map((e) => [e.split_key, e.idx, name]));
  const seen = new Set();
  for (const [, idx] of everything) {
    if (seen.has(idx)) throw new bag.Failed(`idx ${idx} appears more than once; pools must be disjoint.`);
    seen.add(idx);
  }
  const rows = protocol.resources.dataset.rows;
  if (everything.length !== rows) throw new bag.Failed(`the pools hold ${everything.length} rows together, the dataset has ${rows}.`);
  everything.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1] || (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : 0)));
  let start = 0;
  for (const [name, size] of spec) {
    const derived = everything.slice(start, start + size).map((e) => e[1]);
    const stored = pools.pools[name].map((e) => e.idx);
    if (derived.some((v, i) => v !== stored[i])) throw new bag.Failed(`pool '${name}' differs from the split rule: some idx are in the wrong pool.`);
    start += size;
  }
  return `pools re-derived from ${rows} ids: ${spec.map(([n, s]) => `${n} ${s}`).join(', ')}; disjoint, ascending key`;
}

async function columns(ctx, { pool }) {
  const path = `data/predictions/${pool}.parquet`;
  const data = ctx.bag.files.get(path);
  if (!data) throw new bag.Failed(`${path} is missing.`);
  const protocol = ctx.doc('data/protocol.json');
  const statement = ctx.need(ctx.statement, 'the signed statement');
  const dims = protocolDims(ctx, protocol);
  if (!dims) throw new bag.Failed("not checked: the protocol's sizes are beyond the verifier's bounds (see protocol.bounds).");
  const k = protocol.resources.dataset.labels.length;
  const size = dims.sizes.has(pool) ? dims.sizes.get(pool) : dims.rows;
  const table = await readPool(path, data, k, size, statement.predicate.format.version >= 2);
  ctx.tables.set(pool, table);
  return `${table.n} rows, ${k} classes, columns and types as specified`;
}

function rowsCheck(ctx, { pool }) {
  const t = ctx.table(pool);
  const entries = ctx.doc('data/pools.json').pools[pool];
  const path = `data/predictions/${pool}.parquet`;
  if (t.n !== entries.length) throw new bag.Failed(`${path} has ${t.n} rows, pools.json lists ${entries.length} for '${pool}'.`);
  const c = t.columns;
  entries.forEach((e, i) => {
    if (Number(c.idx[i]) !== e.idx || c.split_key[i] !== e.split_key || c.text_sha256[i] !== e.text_sha256) throw new bag.Failed(`${path} row ${i} is not the pool's entry ${i} (idx, split key, text hash).`);
  });
  return `${entries.length} rows in pool order, ids and text hashes equal pools.json`;
}

function probabilitiesCheck(ctx, { pool }) {
  const t = ctx.table(pool);
  const path = `data/predictions/${pool}.parquet`;
  const lp = new Float64Array(t.k);
  for (let i = 0; i < t.n; i++) {
    const off = i * t.k;
    let top = -Infinity;
    for (let j = 0; j < t.k; j++) top = Math.max(top, t.z[off + j]);
    let e = 0;
    for (let j = 0; j < t.k; j++) e += Math.exp(t.z[off + j] - top);
    for (let j = 0; j < t.k; j++) {
      lp[j] = Math.exp(t.z[off + j] - top - Math.log(e));
      if (!(Math.abs(lp[j] - t.columns[`prob_${j}`][i]) <= METRIC_TOL)) throw new bag.Failed(`${path} row ${i} prob_${j} is ${t.columns[`prob_${j}`][i]}, softmax of the logits gives ${lp[j]}.`);
    }
    if (Number(t.columns.pred[i]) !== firstArgmax(t.z, off, t.k)) throw new bag.Failed(`${path} row ${i} pred is ${t.columns.pred[i]}, the first argmax of the logits is ${firstArgmax(t.z, off, t.k)}.`);
  }
  return `probabilities within ${METRIC_TOL} of softmax(logits) in float64; pred = first argmax`;
}

async function fitRecord(ctx) {
  const t = ctx.doc('data/temperature.json');
  const fit = ctx.doc('data/protocol.json').fit;
  const cal = ctx.table('calibration');
  const problems = [];
  if (t.pool !== fit.pool) problems.push(`fitted on pool '${t.pool}', the protocol fits on '${fit.pool}'`);
  if (t.n !== cal.n) problems.push(`n is ${t.n}, the calibration pool has ${cal.n} rows`);
  if (t.predictions_sha256 !== (await ctx.sha('data/predictions/calibration.parquet'))) problems.push('predictions_sha256 is not the calibration predictions in the bag');
  if (t.t_min !== fit.t_min || t.t_max !== fit.t_max) problems.push('the interval is not the protocol\'s');
  if (!(t.beta > 0 && Math.abs(t.temperature - 1 / t.beta) <= 4e-16 * Math.abs(t.temperature))) problems.push(`temperature ${t.temperature} is not 1/beta`);
  if (!(fit.t_min <= t.temperature && t.temperature <= fit.t_max)) problems.push(`temperature ${t.temperature} is outside [t_min, t_max]`);
  const before = meanNll(cal, 1);
  const after = meanNll(cal, t.beta);
  ctx.figures.fit = { nll_before: before, nll_after: after };
  if (!(Math.abs(t.nll_before - before) <= METRIC_TOL)) problems.push(`nll_before is ${t.nll_before}, recomputed ${before}`);
  if (!(Math.abs(t.nll_after - after) <= METRIC_TOL)) problems.push(`nll_after is ${t.nll_after}, recomputed ${after}`);
  if (after > before + METRIC_TOL) problems.push('the fitted temperature raises the fit-pool NLL');
  if (problems.length) throw new bag.Failed(`temperature.json: ${problems.join('; ')}.`);
  return `T = ${t.temperature.toPrecision(9)} on ${t.n} calibration rows; NLL ${before.toFixed(6)} -> ${after.toFixed(6)} recomputed`;
}

function refit(ctx) {
  const fit = ctx.doc('data/protocol.json').fit;
  const t = ctx.doc('data/temperature.json');
  const cal = ctx.table('calibration');
  const found = bisect(cal, fit.t_min, fit.t_max, fit.steps);
  ctx.figures.refit = found;
  const side = t.boundary ? t.boundary_side : null;
  if (side !== found.boundarySide) throw new bag.Failed(`the bundle reports boundary ${side}, the re-fit finds ${found.boundarySide} (T = ${found.temperature}).`);
  const rel = Math.abs(t.temperature - found.temperature) / found.temperature;
  if (!(rel <= REFIT_REL_TOL)) throw new bag.Failed(`temperature ${t.temperature} is not the NLL minimiser: the protocol's bisection, re-run here, gives ${found.temperature} (relative difference ${rel.toExponential(2)} > ${REFIT_REL_TOL}).`);
  return `re-fit T = ${found.temperature.toPrecision(12)} by the protocol's bisection, relative difference ${rel.toExponential(1)}`;
}

async function metricsRecord(ctx) {
  const m = ctx.doc('data/metrics.json');
  const t = ctx.doc('data/temperature.json');
  const problems = [];
  if (m.temperature_sha256 !== (await ctx.sha('data/temperature.json'))) problems.push('temperature_sha256 is not the temperature.json in the bag');
  if (m.beta !== t.beta || m.temperature !== t.temperature) problems.push('beta/temperature differ from temperature.json');
  if (JSON.stringify(Object.keys(m.pools).sort()) !== JSON.stringify([...POOLS].sort())) problems.push(`pools ${JSON.stringify(Object.keys(m.pools).sort())}`);
  const roles = { audit: 'evidence', calibration: 'fit pool, not evidence' };
  for (const pool of POOLS) {
    const entry = m.pools[pool];
    if (!entry) continue;
    if (entry.role !== roles[pool]) problems.push(`pool '${pool}' role '${entry.role}', expected '${roles[pool]}'`);
    if (entry.predictions_sha256 !== (await ctx.sha(`data/predictions/${pool}.parquet`))) problems.push(`pool '${pool}' predictions_sha256 is not the file in the bag`);
  }
  if (problems.length) throw new bag.Failed(`metrics.json: ${problems.join('; ')}.`);
  return 'metrics name this temperature and these prediction files; roles as specified';
}

const METRIC_INTS = ['n', 'correct', 'count', 'accepted', 'wrong_accepted'];

/** Every leaf of `found` (a parseRaw result) against `expected`: floats within tol, integers and
 * the rest exactly and of the same JSON kind. The first differences, as strings. */
function compare(found, expected, where, key, out, ints = METRIC_INTS) {
  if (expected && typeof expected === 'object' && !Array.isArray(expected)) {
    const keys = found instanceof Map ? [...found.keys()].sort() : null;
    if (!keys || JSON.stringify(keys) !== JSON.stringify(Object.keys(expected).sort())) {
      out.push(`${where}: keys ${keys ? JSON.stringify(keys) : 'not an object'}, expected ${JSON.stringify(Object.keys(expected).sort())}`);
      return;
    }
    for (const k of Object.keys(expected)) compare(found.get(k), expected[k], `${where}.${k}`, k, out, ints);
  } else if (Array.isArray(expected)) {
    if (!Array.isArray(found) || found.length !== expected.length) {
      out.push(`${where}: ${Array.isArray(found) ? found.length : 'no'} entries, expected ${expected.length}`);
      return;
    }
    expected.forEach((e, i) => compare(found[i], e, `${where}[${i}]`, key, out, ints));
  } else if (typeof expected === 'number' && !ints.includes(key)) {
    if (!(found instanceof Num) || !(Math.abs(found.value - expected) <= METRIC_TOL)) out.push(`${where}: bundle ${found instanceof Num ? found.token : JSON.stringify(found)}, recomputed ${expected}`);
  } else if (typeof expected === 'number') {
    if (!(found instanceof Num) || !found.integer || found.value !== expected) out.push(`${where}: bundle ${found instanceof Num ? found.token : JSON.stringify(found)}, recomputed ${expected}`);
  } else if (found !== expected) out.push(`${where}: bundle ${JSON.stringify(found)}, recomputed ${JSON.stringify(expected)}`);
}

function metricsCheck(ctx, { pool, which }) {
  ctx.doc('data/metrics.json');
  const raw = ctx.rawOf('data/metrics.json');
  const t = ctx.doc('data/temperature.json');
  const threshold = ctx.doc('data/protocol.json').metrics.threshold.value;
  const table = ctx.table(pool);
  const expected = metricSet(table, which === 'raw' ? 1 : t.beta, threshold);
  (ctx.figures.metrics ||= {})[`${pool}.${which}`] = expected;
  const pools = raw.get('pools');
  if (!pools.has(pool)) throw new bag.Failed(`metrics.json has no '${pool}' pool.`);
  const found = pools.get(pool).get(which);
  // Figures this page does not compute (a newer format's) are the Python verifier's to check.
  const unknown = [...found.keys()].filter((k) => !(k in expected));
  if (unknown.length) return null;
  const diffs = [];
  compare(found, expected, `${pool}.${which}`, '', diffs);
  if (diffs.length) throw new bag.Failed(`metrics differ from the logits: ${diffs.slice(0, 3).join('; ')}${diffs.length > 3 ? ` (+${diffs.length - 3} more)` : ''}.`);
  return `n ${expected.n}, accuracy ${expected.accuracy.toFixed(4)}, NLL ${expected.nll.toFixed(4)}, ECE ${expected.ece.toFixed(4)}: all fields, 10 bins, threshold counts within 1e-9`;
}

function argmaxCheck(ctx) {
  const m = ctx.doc('data/metrics.json');
  const t = ctx.doc('data/temperature.json');
  let changed = 0;
  for (const pool of POOLS) {
    const tb = ctx.table(pool);
    const scaled = new Float64Array(tb.k);
    for (let i = 0; i < tb.n; i++) {
      const off = i * tb.k;
      for (let j = 0; j < tb.k; j++) scaled[j] = tb.z[off + j] * t.beta;
      if (firstArgmax(scaled, 0, tb.k) !== firstArgmax(tb.z, off, tb.k)) changed++;
    }
  }
  if (m.argmax_unchanged !== (changed === 0)) throw new bag.Failed(`argmax_unchanged is ${m.argmax_unchanged}, but the temperature changes ${changed} predictions.`);
  if (changed) throw new bag.Failed(`the temperature changes the argmax of ${changed} rows; a temperature > 0 cannot.`);
  return 'argmax of every row unchanged by the temperature';
}

function batchesCheck(ctx, { pool }) {
  const t = ctx.table(pool);
  const path = `data/predictions/${pool}.parquet`;
  const { batch_size: size, max_length: maxLength } = ctx.doc('data/protocol.json').inference;
  const c = t.columns;
  const tokens = c.token_count.map(Number);
  if (tokens.some((n) => n < 1 || n > maxLength)) throw new bag.Failed(`${path} token counts lie outside 1..${maxLength}.`);
  const cut = tokens.findIndex((n, i) => c.truncated[i] && n !== maxLength);
  if (cut >= 0) throw new bag.Failed(`${path} row ${cut} is marked truncated with ${tokens[cut]} tokens, not max_length ${maxLength}.`);
  if (c.full_token_count) {
    const full = c.full_token_count.map(Number);
    const r = full.findIndex((f, i) => (c.truncated[i] ? f <= maxLength : f !== tokens[i]));
    if (r >= 0) throw new bag.Failed(`${path} row ${r} has ${full[r]} tokens before truncation and ${tokens[r]} after, truncated ${c.truncated[r]}; a row is cut exactly when it is longer than max_length ${maxLength}.`);
  }
  const order = [...tokens.keys()].sort((a, b) => tokens[b] - tokens[a] || (c.split_key[a] < c.split_key[b] ? -1 : c.split_key[a] > c.split_key[b] ? 1 : 0));
  const expected = new Array(order.length);
  order.forEach((row, position) => { expected[row] = Math.floor(position / size); });
  const bad = expected.findIndex((e, i) => e !== Number(c.batch[i]));
  if (bad >= 0) throw new bag.Failed(`${path} row ${bad} is in batch ${c.batch[bad]}, the protocol's batch order puts it in batch ${expected[bad]}.`);
  return `${order.length ? Math.max(...expected) + 1 : 0} batches of ${size} in protocol order`;
}

function trajectoryCheck(ctx) {
  const cal = ctx.table('calibration');
  const fit = ctx.doc('data/protocol.json').fit;
  const traj = ctx.doc('data/trajectory.json');
  const t = ctx.doc('data/temperature.json');
  const dims = protocolDims(ctx, ctx.doc('data/protocol.json'));
  if (!dims) throw new bag.Failed("not checked: the protocol's sizes are beyond the verifier's bounds (see protocol.bounds).");
  if (traj.steps.length > dims.steps) throw new bag.Failed(`trajectory.json holds ${traj.steps.length} steps, the protocol allows ${dims.steps}; not recomputed.`);
  const bad = (why) => new bag.Failed(`the trajectory is not a valid bisection: ${why}.`);
  const betaMin = 1 / fit.t_max;
  const betaMax = 1 / fit.t_min;
  if (traj.beta_min !== betaMin || traj.beta_max !== betaMax) throw bad('its bracket is not [1/t_max, 1/t_min]');
  const gEnds = [gradient(cal, betaMin), gradient(cal, betaMax)];
  if (!(Math.abs(traj.g_at_beta_min - gEnds[0]) <= METRIC_TOL)) throw bad(`g_at_beta_min is ${traj.g_at_beta_min}, recomputed from the logits ${gEnds[0]}`);
  if (!(Math.abs(traj.g_at_beta_max - gEnds[1]) <= METRIC_TOL)) throw bad(`g_at_beta_max is ${traj.g_at_beta_max}, recomputed from the logits ${gEnds[1]}`);
  const { steps } = traj;
  if (t.boundary) {
    if (steps.length) throw bad(`a boundary solution has ${steps.length} bisection steps, expected none`);
    let edge;
    if (t.boundary_side === 't_max') {
      if (!(gEnds[0] >= -METRIC_TOL)) throw bad('boundary t_max claimed but the NLL still falls inside the interval');
      edge = betaMin;
    } else if (t.boundary_side === 't_min') {
      if (!(gEnds[1] <= METRIC_TOL)) throw bad('boundary t_min claimed but the NLL still falls inside the interval');
      edge = betaMax;
    } else throw bad(`boundary is true but boundary_side is ${t.boundary_side}`);
    if (t.beta !== edge || t.bracket[0] !== edge || t.bracket[1] !== edge || t.bracket.length !== 2) throw bad(`boundary ${t.boundary_side}: beta and bracket are not the edge`);
    return `boundary solution at ${t.boundary_side}, consistent with g at the ends`;
  }
  if (t.boundary_side !== null) throw bad(`boundary is false but boundary_side is ${t.boundary_side}`);
  if (!(gEnds[0] < METRIC_TOL && gEnds[1] > -METRIC_TOL)) throw bad('no sign change of g on [1/t_max, 1/t_min] yet the solution is not flagged as a boundary');
  if (steps.length !== fit.steps) throw bad(`${steps.length} bisection steps, the protocol fixes ${fit.steps}`);
  if (t.steps !== steps.length) throw bad(`temperature.json says ${t.steps} steps, the trajectory holds ${steps.length}`);
  let lo = betaMin;
  let hi = betaMax;
  steps.forEach((s, i) => {
    const n = i + 1;
    if (s.step !== n) throw bad(`step ${n} is numbered ${s.step}`);
    if (s.lo !== lo || s.hi !== hi) throw bad(`step ${n} does not start from the bracket the previous step left`);
    if (s.mid !== (lo + hi) / 2) throw bad(`step ${n} mid is not (lo + hi) / 2`);
    const g = gradient(cal, s.mid);
    if (!(Math.abs(s.g - g) <= METRIC_TOL)) throw bad(`step ${n} g(${s.mid}) is ${s.g}, recomputed from the logits ${g}`);
    const [newLo, newHi] = s.g > 0 ? [lo, s.mid] : [s.mid, hi];
    const ulp = 4 * Number.EPSILON * Math.max(Math.abs(lo), Math.abs(hi));
    if (!(Math.abs((newHi - newLo) - (hi - lo) / 2) <= ulp)) throw bad(`step ${n} does not halve the bracket`);
    [lo, hi] = [newLo, newHi];
  });
  if (t.bracket.length !== 2 || t.bracket[0] !== lo || t.bracket[1] !== hi) throw bad('the final bracket is not where the steps end');
  if (t.beta !== (lo + hi) / 2) throw bad('beta is not the midpoint of the final bracket');
  const gFinal = gradient(cal, t.beta);
  if (!(Math.abs(t.final_gradient - gFinal) <= METRIC_TOL)) throw bad(`final_gradient ${t.final_gradient}, recomputed ${gFinal}`);
  if (!(Math.abs(gFinal) <= 1e-6)) throw bad(`the final gradient ${gFinal} is not near zero`);
  return `${steps.length} steps, bracket halves each step, lo/hi follow the sign of g, g recomputed within 1e-9, final g = ${gFinal.toExponential(2)}`;
}

/** Python's format(x, 'g'), for the warnings' words. */
function pyG(x) {
  if (x === 0) return '0';
  const exp = Math.floor(Math.log10(Math.abs(x)));
  if (exp < -4 || exp >= 6) {
    const [m, e] = x.toExponential(5).split('e');
    const mant = m.includes('.') ? m.replace(/\.?0+$/, '') : m;
    const n = parseInt(e, 10);
    return `${mant}e${n < 0 ? '-' : '+'}${String(Math.abs(n)).padStart(2, '0')}`;
  }
  const fixed = x.toPrecision(6);
  return fixed.includes('.') ? fixed.replace(/\.?0+$/, '') : fixed;
}

function expectedWarnings(accuracy, k, t) {
  const out = [];
  if (accuracy < 1 / k) out.push(`accuracy ${pct(accuracy)} is below chance (${pct(1 / k)}): the label map is probably wrong`);
  if (t.boundary) {
    out.push(`T = ${pyG(t.temperature)} sits at the bound ${t.boundary_side} of the fit interval [${pyG(t.t_min)}, ${pyG(t.t_max)}]: no temperature inside it fits, which usually means a wrong label map or a broken model`);
  }
  return out;
}

const UNRECORDED = ' (recomputed; this bundle records no warnings)';
const PER_CLASS_UNRECORDED = ' (the per-class ones recomputed; this bundle records no per-class results)';

function warningsCheck(ctx) {
  const m = ctx.doc('data/metrics.json');
  const k = ctx.doc('data/protocol.json').resources.dataset.labels.length;
  const audit = ctx.table('audit');
  let right = 0;
  for (let i = 0; i < audit.n; i++) right += firstArgmax(audit.z, i * audit.k, audit.k) === audit.y[i] ? 1 : 0;
  const accuracy = right / audit.n;
  const expected = expectedWarnings(accuracy, k, ctx.doc('data/temperature.json'));
  const [byClass] = expectedClassWarnings(counts(audit), m);
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  if ('per_class' in m) expected.push(...byClass);
  else if (byClass.length) {
    // Written before per_class (its schema revision allows that, metrics.per-class): the recorded
    // list is checked by the earlier rule, and the per-class warnings are shown.
    if ('warnings' in m && !same(m.warnings, expected)) throw new bag.Failed(`metrics.json warns ${JSON.stringify(m.warnings)}, the logits and temperature.json call for ${JSON.stringify(expected)}.`);
    return `WARNING: ${[...expected, ...byClass].join('; WARNING: ')}${'warnings' in m ? PER_CLASS_UNRECORDED : UNRECORDED}`;
  }
  if (!('warnings' in m)) {
    return expected.length ? `WARNING: ${expected.join('; WARNING: ')}${UNRECORDED}` : `none called for${UNRECORDED}: audit accuracy ${pct(accuracy)}`;
  }
  if (!same(m.warnings, expected)) throw new bag.Failed(`metrics.json warns ${JSON.stringify(m.warnings)}, the logits and temperature.json call for ${JSON.stringify(expected)}.`);
  return expected.length ? `WARNING: ${expected.join('; WARNING: ')}` : `none called for: audit accuracy ${pct(accuracy)} at or above chance ${pct(1 / k)}, T inside the fit interval`;
}

/** Every leaf of a per_class record (parseRaw values) against the recomputed one: integers must be
 * JSON integers and equal, rates within the metric tolerance, null only where expected. */
function compareCounts(found, expected, where, out) {
  if (Array.isArray(expected)) {
    if (!Array.isArray(found) || found.length !== expected.length) {
      out.push(`${where}: ${Array.isArray(found) ? found.length : 'no'} entries, expected ${expected.length}`);
      return;
    }
    expected.forEach((e, i) => compareCounts(found[i], e, `${where}[${i}]`, out));
    return;
  }
  const shown = found instanceof Num ? found.token : JSON.stringify(found);
  if (expected === null) {
    if (found !== null) out.push(`${where}: bundle ${shown}, recomputed None`);
  } else if ('rate' in expected) {
    if (!(found instanceof Num) || !(Math.abs(found.value - expected.rate) <= METRIC_TOL)) out.push(`${where}: bundle ${shown}, recomputed ${expected.rate}`);
  } else if (!(found instanceof Num) || !found.integer || found.value !== expected.count) out.push(`${where}: bundle ${shown}, recomputed ${expected.count}`);
}

/** Whether the signed predicate names this page's metrics schema, which always writes per_class. */
function namesCurrentSchema(ctx) {
  const statement = ctx.need(ctx.statement, 'the signed statement');
  const named = ((statement.predicate.schemas || {})['data/metrics.json'] || {}).sha256;
  return named === SCHEMA_SHA256.metrics;
}

function perClassCheck(ctx) {
  const m = ctx.doc('data/metrics.json');
  ctx.figures.perClass = Object.fromEntries(POOLS.map((pool) => [pool, expectedRecord(counts(ctx.table(pool)))]));
  if (!('per_class' in m)) {
    if (namesCurrentSchema(ctx)) throw new bag.Failed('metrics.json names the metrics schema that always writes per_class, but has none.');
    const [warned, how] = expectedClassWarnings(counts(ctx.table('audit')), m);
    const found = warned.map((w) => `WARNING: ${w}`).join('; ') || 'no per-class warning called for';
    return `recomputed; this bundle records no per-class results: ${found} (${how})`;
  }
  const raw = ctx.rawOf('data/metrics.json').get('per_class');
  const details = [];
  for (const pool of POOLS) {
    const table = ctx.table(pool);
    const c = counts(table);
    const record = m.per_class[pool];
    const expected = ctx.figures.perClass[pool];
    if (record.support.length !== c.length) throw new bag.Failed(`per_class ${pool} has ${record.support.length} labels, the logits ${c.length}.`);
    const diffs = [];
    const found = raw.get(pool);
    const keys = ['support', 'predicted', 'correct', 'recall', 'precision', 'confusion'];
    for (const key of keys) {
      const wrap = (v) => (v === null ? null : Array.isArray(v) ? v.map(wrap) : ['recall', 'precision'].includes(key) ? { rate: v } : { count: v });
      compareCounts(found.get(key), wrap(expected[key]), `per_class.${pool}.${key}`, diffs);
    }
    if (diffs.length) throw new bag.Failed(`per-class results differ from the logits: ${diffs.slice(0, 3).join('; ')}.`);
    const best = record.best_permutation;
    const right = checkPermutation(c, best);
    const n = expected.support.reduce((a, b) => a + b, 0);
    if (Math.abs(best.accuracy - right / Math.max(n, 1)) > METRIC_TOL) throw new bag.Failed(`per_class ${pool} best_permutation.accuracy ${best.accuracy} is not ${right} / ${n}.`);
    const rates = expected.recall.filter((r) => r !== null);
    const low = rates.length ? Math.min(...rates) : null;
    details.push(`${pool}: ${c.length} labels, lowest recall ${low === null ? 'n/a' : pct(low)}, best relabelling ${right} of ${n} right (recorded ${expected.correct.reduce((a, b) => a + b, 0)})`);
  }
  return `${details.join('; ')}; optimality certified`;
}

/** Python's format(x, '.2g') and format(x, '.6g'). */
function pyGeneral(x, digits) {
  if (x === 0 || !Number.isFinite(x)) return x === 0 ? '0' : String(x);
  const exp = Number(x.toExponential(digits - 1).split('e')[1]);
  if (exp < -4 || exp >= digits) {
    const [m, e] = x.toExponential(digits - 1).split('e');
    const n = parseInt(e, 10);
    return `${m.includes('.') ? m.replace(/\.?0+$/, '') : m}e${n < 0 ? '-' : '+'}${String(Math.abs(n)).padStart(2, '0')}`;
  }
  const fixed = x.toFixed(Math.max(0, digits - 1 - exp));
  return fixed.includes('.') ? fixed.replace(/\.?0+$/, '') : fixed;
}

/** Every leaf of `found` (parseRaw values) against `expected` (plain): the keys in `ints` must be
 * equal JSON integers, other numbers within tol + tol |expected|, strings equal. */
function compareWithin(found, expected, where, ints, out) {
  if (expected && typeof expected === 'object') {
    const keys = found instanceof Map ? [...found.keys()].sort() : null;
    if (!keys || JSON.stringify(keys) !== JSON.stringify(Object.keys(expected).sort())) {
      out.push(`${where}: keys ${keys ? JSON.stringify(keys) : 'not an object'}, expected ${JSON.stringify(Object.keys(expected).sort())}`);
      return;
    }
    for (const key of Object.keys(expected)) compareWithin(found.get(key), expected[key], `${where}.${key}`, ints, out);
    return;
  }
  const key = where.slice(where.lastIndexOf('.') + 1);
  const shown = found instanceof Num ? found.token : JSON.stringify(found);
  if (typeof expected === 'string') {
    if (found !== expected) out.push(`${where}: bundle ${shown}, recomputed ${JSON.stringify(expected)}`);
  } else if (ints.has(key)) {
    if (!(found instanceof Num) || !found.integer || found.value !== expected) out.push(`${where}: bundle ${shown}, recomputed ${expected}`);
  } else if (!(found instanceof Num) || !(Math.abs(found.value - expected) <= METRIC_TOL + METRIC_TOL * Math.abs(expected))) {
    out.push(`${where}: bundle ${shown}, recomputed ${expected}`);
  }
}

function boundsWords(b) {
  const x = b.pools.audit.calibrated;
  const g = (v) => pyGeneral(v, 2);
  return `an equivalent reproduction can move audit calibrated NLL by ${g(x.nll)}, Brier by ${g(x.brier)}, ECE by ${g(x.ece)}, MCE by ${g(x.mce)}, accuracy by ${g(x.accuracy)} (${x.rows_that_could_flip} rows could flip, ${x.rows_near_bin_edge} near a bin edge); T stays in [${pyGeneral(b.temperature.t_low, 6)}, ${pyGeneral(b.temperature.t_high, 6)}]`;
}

function reproductionBounds(ctx) {
  const m = ctx.doc('data/metrics.json');
  const protocol = ctx.doc('data/protocol.json');
  const section = protocol.reproduction;
  const [tau, source] = section === undefined || section === null ? [DEFAULT_LOGIT_TOLERANCE, 'format default'] : [section.logit_tolerance, 'protocol'];
  const expected = expectedBounds({
    tau, source, beta: ctx.doc('data/temperature.json').beta, fit: protocol.fit,
    tables: { calibration: ctx.table('calibration'), audit: ctx.table('audit') }, published: m.pools,
  });
  ctx.figures.bounds = expected;
  if (!('reproduction_bounds' in m)) return `${boundsWords(expected)} (derived here; this bundle was written before reproduction_bounds)`;
  const diffs = [];
  compareWithin(ctx.rawOf('data/metrics.json').get('reproduction_bounds'), expected, 'reproduction_bounds', new Set(['rows_that_could_flip', 'rows_near_bin_edge']), diffs);
  if (diffs.length) throw new bag.Failed(`metrics.json reproduction_bounds differ from the logits: ${diffs.slice(0, 3).join('; ')}.`);
  return boundsWords(expected);
}

/** The format's default reproduction tolerance, and the most a reader of this page accepts
 * (the Python verifier's --max-tolerance default; the page has no option to accept more). */
const DEFAULT_LOGIT_TOLERANCE = 1e-4;

function toleranceCheck(ctx) {
  const section = ctx.doc('data/protocol.json').reproduction;
  const tau = section && typeof section === 'object' && 'logit_tolerance' in section ? section.logit_tolerance : DEFAULT_LOGIT_TOLERANCE;
  if (tau > DEFAULT_LOGIT_TOLERANCE) throw new bag.Failed(`the protocol pre-registers a logit tolerance of ${tau}, ${tau / DEFAULT_LOGIT_TOLERANCE} times the format default ${DEFAULT_LOGIT_TOLERANCE}; this page accepts only the default: run the Python verifier with --max-tolerance ${tau} to accept it.`);
  return `logit tolerance ${tau} (${section && 'logit_tolerance' in section ? "the protocol's" : 'the format default'}), within the ${DEFAULT_LOGIT_TOLERANCE} accepted`;
}

const ESTIMATOR_INTS = ['count', 'correct', 'resamples', 'seed'];

async function estimatorsCheck(ctx) {
  const protocol = ctx.doc('data/protocol.json');
  ctx.doc('data/metrics.json');
  const found = ctx.rawOf('data/metrics.json').get('estimators');
  const entries = (protocol.metrics || {}).estimators;
  if (!entries || !entries.length) throw new bag.Failed('metrics.json holds estimators the protocol does not pre-register.');
  if (found === undefined) throw new bag.Failed('the protocol pre-registers estimators but metrics.json has none.');
  const problem = entryProblem(entries, protocol.bootstrap);
  if (problem) throw new bag.Failed(problem);
  const audit = ctx.table('audit');
  const beta = ctx.doc('data/temperature.json').beta;
  const boot = protocol.bootstrap;
  // The bootstrap's own resamples (numpy's Generator(PCG64(seed)), pcg64.js), the seed exactly as written.
  const matrix = boot ? new ResampleMatrix(BigInt(ctx.rawOf('data/protocol.json').get('bootstrap').get('seed').token), audit.n, Number(boot.resamples)) : null;
  // bootstrap.intervals scores the same matrix when bootstrap.json's seed and count are these: its
  // scorer and hasher ride along in this pass, and it takes their figures instead of drawing again.
  const rider = matrix ? await bootstrapRider(ctx, matrix, audit) : null;
  let record;
  try {
    ({ record } = await expectedEstimators(protocol, audit, beta, matrix, yieldToPage, rider ? [rider.scorer, rider.hasher] : []));
  } finally {
    if (rider && !rider.scorer.failed && !rider.hasher.failed && rider.scorer.b === rider.matrix.resamples) {
      try {
        const indicesSha256 = await rider.hasher.hex();
        ctx.sharedBootstrap = { matrix: rider.matrix, beta: rider.beta, audit, found: { ...rider.scorer.result(), indicesSha256 } };
      } catch {
        // the hashing worker failed: bootstrap.intervals draws and hashes the matrix itself
      }
    } else if (rider) rider.hasher.close();
  }
  ctx.figures.estimators = record;
  const diffs = [];
  compare(found, record, 'estimators', '', diffs, ESTIMATOR_INTS);
  if (diffs.length) throw new bag.Failed(`metrics.json estimators differ from the logits: ${diffs.slice(0, 3).join('; ')}${diffs.length > 3 ? ` (+${diffs.length - 3} more)` : ''}.`);
  const count = Object.keys(record.results).length;
  const paired = entries.filter((e) => 'interval' in e).map((e) => e.id);
  return `${count} estimators, raw and calibrated, ${paired.length ? 'with their paired-bootstrap intervals' : 'none with a pre-registered interval'}, within ${METRIC_TOL}`;
}

/** bootstrap.intervals' scorer and hasher ({matrix, beta, scorer, hasher}) when it will recompute
 * `matrix` (its record's seed and resample count, the protocol's count, the audit pool's size) and
 * its preconditions hold; otherwise null, and it draws the matrix itself. Reads nothing it would
 * not read, and decides nothing: bootstrap.intervals checks everything again. */
async function bootstrapRider(ctx, matrix, audit) {
  try {
    if (!wants(ctx, 'bootstrap') || !ctx.docs.has('data/bootstrap.json') || !ctx.tables.has('calibration')) return null;
    const doc = ctx.docs.get('data/bootstrap.json');
    const dims = protocolDims(ctx, ctx.doc('data/protocol.json'));
    if (!dims || doc.resamples !== dims.resamples) return null;
    const mine = new ResampleMatrix(BigInt(ctx.rawOf('data/bootstrap.json').get('seed').token), audit.n, doc.resamples);
    if (!mine.same(matrix)) return null;
    return { matrix: mine, beta: doc.beta, scorer: new BootstrapScorer(audit, doc.beta, doc.resamples), hasher: await IndicesHasher.create() };
  } catch {
    return null;
  }
}

function clusterOf(ctx) {
  return ctx.need(ctx.doc('data/environment.json').cluster, "environment.json's cluster");
}

function batchOwners(ctx) {
  const cluster = clusterOf(ctx);
  const batches = Object.fromEntries(POOLS.map((pool) => [pool, new Set(ctx.table(pool).columns.batch.map(Number))]));
  return checkBatchOwners(cluster, batches);
}

async function auditTemperature(ctx) {
  return checkAuditTemperature(clusterOf(ctx), await ctx.sha('data/temperature.json'));
}

function labelMap(ctx) {
  const columns = Object.fromEntries(POOLS.map((pool) => [pool, ctx.table(pool).k]));
  return checkLabelMap(ctx.doc('data/protocol.json'), columns);
}

function truncationCheck(ctx) {
  const m = ctx.doc('data/metrics.json');
  const raw = ctx.rawOf('data/metrics.json').get('truncation');
  const maxLength = ctx.doc('data/protocol.json').inference.max_length;
  const details = [];
  for (const pool of POOLS) {
    const t = ctx.table(pool);
    if (!t.columns.full_token_count) throw new bag.Failed(`metrics.json summarises truncation, but the ${pool} predictions have no full_token_count column to check it against.`);
    const full = t.columns.full_token_count.map(Number);
    const expected = { rows: t.n, truncated: t.columns.truncated.filter(Boolean).length, longest_tokens: full.length ? Math.max(...full) : 0, max_length: maxLength };
    const found = raw instanceof Map ? raw.get(pool) : undefined;
    const same = found instanceof Map && found.size === 4 && Object.entries(expected).every(([key, v]) => found.get(key) instanceof Num && found.get(key).value === v);
    if (!same) throw new bag.Failed(`metrics.json truncation of ${pool} is ${JSON.stringify(m.truncation[pool])}, the predictions give ${JSON.stringify(expected)}.`);
    details.push(`${pool} ${expected.truncated} of ${expected.rows} cut (longest ${expected.longest_tokens} tokens)`);
  }
  return `${details.join('; ')}, at max_length ${maxLength}`;
}

/** pools.json's `sizes` as a parseRaw tree ({sizes: Map}), without parsing its per-row entries
 * again: in the canonical text `sizes` is the last key, so the text ends with `"sizes":{...}}`. */
function poolSizes(ctx) {
  const doc = ctx.doc('data/pools.json');
  if (!ctx.raw.has('data/pools.json')) {
    const text = new TextDecoder().decode(ctx.bag.files.get('data/pools.json'));
    const at = text.lastIndexOf('"sizes":{');
    try {
      const sizes = parseRaw(text.slice(at + 8, text.length - 2), 'data/pools.json sizes');
      if (at >= 0 && text.endsWith('}}\n') && JSON.stringify(plain(sizes)) === JSON.stringify(doc.sizes)) return new Map([['sizes', sizes]]);
    } catch {
      // not where the canonical layout puts it: read the whole record below
    }
  }
  return ctx.rawOf('data/pools.json');
}

/** report.md's checked tables restate the records; its images name payload files. */
function reportTables(ctx) {
  const data = ctx.bag.files.get('data/report.md');
  if (!data) throw new bag.Failed('data/report.md is missing.');
  const optional = (section) => (wants(ctx, section) ? ctx.rawOf(SECTION_FILES[section]) : null);
  const records = {
    metrics: ctx.rawOf('data/metrics.json'), temperature: ctx.rawOf('data/temperature.json'), pools: poolSizes(ctx),
    bootstrap: optional('bootstrap'), stability: optional('stability'),
  };
  return checkReport(data, records, new Set(bag.payload(ctx.bag)));
}

/** bootstrap.json's header against the protocol, the temperature and the files it names. */
async function bootstrapRecord(ctx) {
  const doc = ctx.doc('data/bootstrap.json');
  const spec = ctx.doc('data/protocol.json').bootstrap;
  const n = ctx.table('audit').n;
  const [predictions, temperature, metrics] = await Promise.all(['data/predictions/audit.parquet', 'data/temperature.json', 'data/metrics.json'].map((p) => ctx.sha(p)));
  const problems = [];
  const wanted = [['pool', spec.pool], ['n', n], ['beta', ctx.doc('data/temperature.json').beta], ['resamples', spec.resamples], ['seed', spec.seed],
    ['predictions_sha256', predictions], ['temperature_sha256', temperature], ['metrics_sha256', metrics]];
  for (const [key, want] of wanted) if (!pyEqual(doc[key], want)) problems.push(`${key} is ${JSON.stringify(doc[key])}, expected ${JSON.stringify(want)}`);
  const { interval } = spec;
  if (!pyEqual(doc.interval.quantiles, interval.quantiles) || !pyEqual(doc.interval.level, interval.level) || !pyEqual(doc.interval.method, interval.method)) {
    problems.push(`interval ${JSON.stringify(doc.interval)}, the protocol fixes ${JSON.stringify(interval.quantiles)} ${interval.method}`);
  }
  if (!pyEqual(Object.keys(doc.differences).sort(), [...spec.metrics].sort())) problems.push(`metrics ${JSON.stringify(Object.keys(doc.differences).sort())}, the protocol names ${JSON.stringify([...spec.metrics].sort())}`);
  if (problems.length) throw new bag.Failed(`bootstrap.json: ${problems.join('; ')}.`);
  return `${doc.resamples} resamples of the ${n} audit rows, seed ${doc.seed}, at this temperature and these predictions`;
}

/** The resample matrix drawn again from the seed (pcg64.js), every resample scored raw and
 * calibrated, the quantile intervals and the verdicts (bootstrap.js), within the Python verifier's
 * tolerance (verify/bootstrap.py: 1e-9). */
async function bootstrapIntervals(ctx) {
  const doc = ctx.doc('data/bootstrap.json');
  // Python runs it only once both predictions tables are read (payload.predictions); skipped otherwise.
  ctx.table('calibration');
  const audit = ctx.table('audit');
  const dims = protocolDims(ctx, ctx.doc('data/protocol.json'));
  if (!dims) throw new bag.Failed("not recomputed: the protocol's sizes are beyond the verifier's bounds (see protocol.bounds).");
  // The record's count sizes the matrix drawn here: it may not exceed what the (bounded) protocol asks.
  if (doc.resamples !== dims.resamples) throw new bag.Failed(`bootstrap.json asks for ${Number(doc.resamples).toLocaleString('en-US')} resamples, the protocol for ${Number(dims.resamples).toLocaleString('en-US')}; not recomputed.`);
  const seed = BigInt(ctx.rawOf('data/bootstrap.json').get('seed').token); // any size, exactly as written
  // Scored in metrics.estimators' pass when that drew this very matrix for this pool at this beta.
  const shared = ctx.sharedBootstrap;
  const found = shared && shared.audit === audit && Object.is(shared.beta, doc.beta) && shared.matrix.same(new ResampleMatrix(seed, audit.n, doc.resamples))
    ? shared.found : await pairedBootstrap(audit, doc.beta, seed, doc.resamples, yieldToPage);
  const figures = { indices_sha256: found.indicesSha256, differences: {} };
  ctx.figures.bootstrap = figures;
  if (found.indicesSha256 !== doc.indices_sha256) throw new bag.Failed(`indices_sha256 is ${String(doc.indices_sha256).slice(0, 16)}…, the protocol's generator gives ${found.indicesSha256.slice(0, 16)}….`);
  const whole = { raw: metricSet(audit, 1, 0.9), calibrated: metricSet(audit, doc.beta, 0.9) };
  const [qLow, qHigh] = doc.interval.quantiles;
  const problems = [];
  for (const [metric, recorded] of Object.entries(doc.differences)) {
    const sorted = found[metric].slice().sort();
    const want = { point: whole.calibrated[metric] - whole.raw[metric], lower: quantileLinear(sorted, qLow), upper: quantileLinear(sorted, qHigh) };
    figures.differences[metric] = want;
    for (const key of ['point', 'lower', 'upper']) {
      if (!(Math.abs(recorded[key] - want[key]) <= METRIC_TOL)) problems.push(`${metric}.${key}: bundle ${recorded[key]}, recomputed ${want[key]}`);
    }
    const verdict = intervalVerdict(recorded.lower, recorded.upper);
    if (recorded.verdict !== verdict) problems.push(`${metric}.verdict is '${recorded.verdict}' for the interval [${recorded.lower}, ${recorded.upper}], the rule gives '${verdict}'`);
  }
  if (problems.length) throw new bag.Failed(`bootstrap differs from the logits: ${problems.slice(0, 3).join('; ')}.`);
  const signed = (v) => `${v >= 0 ? '+' : ''}${v.toFixed(4)}`;
  const summary = Object.entries(doc.differences).map(([m, f]) => `${m} ${signed(f.point)} [${signed(f.lower)}, ${signed(f.upper)}] ${f.verdict}`).join(', ');
  return `${doc.resamples} x ${audit.n} resample matrix drawn from seed ${seed} (its sha256 equal) and every interval recomputed within ${METRIC_TOL}: ${summary}`;
}

/** The first m rows of a pool, without copying. */
const prefix = (pool, m) => ({ n: m, k: pool.k, z: pool.z.subarray(0, m * pool.k), y: pool.y.subarray(0, m) });

/** The calibration-size stability study: each nested prefix of the calibration pool re-fitted by the
 * protocol's bisection (the one fit.refit runs), its NLLs recomputed, within the Python verifier's
 * tolerances (verify/stability.py: 1e-9 for NLLs, 1e-6 relative for temperatures). */
async function stabilityRefit(ctx) {
  const doc = ctx.doc('data/stability.json');
  const protocol = ctx.doc('data/protocol.json');
  const cal = ctx.table('calibration'); // both tables first: Python skips the check without them
  const audit = ctx.table('audit');
  if (!protocolDims(ctx, protocol)) throw new bag.Failed("not recomputed: the protocol's sizes are beyond the verifier's bounds (see protocol.bounds).");
  const { stability: spec, fit } = protocol;
  const [calibration, auditSha, temperature] = await Promise.all(['data/predictions/calibration.parquet', 'data/predictions/audit.parquet', 'data/temperature.json'].map((p) => ctx.sha(p)));
  const main = ctx.doc('data/temperature.json').temperature; // read before any comparison, as Python does
  const problems = [];
  const header = [['calibration_predictions_sha256', calibration], ['audit_predictions_sha256', auditSha], ['temperature_sha256', temperature],
    ['calibration_n', cal.n], ['audit_n', audit.n], ['t_min', fit.t_min], ['t_max', fit.t_max], ['steps', fit.steps]];
  for (const [key, want] of header) if (!pyEqual(doc[key], want)) problems.push(`${key} is ${JSON.stringify(doc[key])}, expected ${JSON.stringify(want)}`);
  const raw = meanNll(audit, 1);
  const figures = { audit_nll_raw: raw, sizes: [] };
  ctx.figures.stability = figures;
  if (!(Math.abs(doc.audit_nll_raw - raw) <= METRIC_TOL)) problems.push(`audit_nll_raw is ${doc.audit_nll_raw}, recomputed ${raw}`);
  const sizes = [...spec.sizes].sort((a, b) => a - b);
  const fitted = sizes.filter((m) => m <= cal.n);
  const skipped = sizes.filter((m) => m > cal.n);
  if (!pyEqual(doc.sizes.map((e) => e.m), fitted) || !pyEqual(doc.skipped_sizes, skipped)) {
    problems.push(`sizes ${JSON.stringify(doc.sizes.map((e) => e.m))} skipped ${JSON.stringify(doc.skipped_sizes)}, the protocol's ${JSON.stringify(sizes)} on ${cal.n} rows give ${JSON.stringify(fitted)} skipped ${JSON.stringify(skipped)}`);
  }
  if (problems.length) throw new bag.Failed(`stability.json: ${problems.slice(0, 3).join('; ')}.`);
  for (const entry of doc.sizes) {
    const { m } = entry;
    const sub = prefix(cal, m);
    const r = bisect(sub, fit.t_min, fit.t_max, fit.steps);
    const after = meanNll(sub, entry.beta);
    const auditNll = meanNll(audit, entry.beta);
    figures.sizes.push({ m, temperature: r.temperature, calibration_nll_after: after, audit_nll: auditNll });
    const where = `m = ${m}`;
    const side = entry.boundary ? entry.boundary_side : null;
    if (side !== r.boundarySide || entry.boundary !== (entry.boundary_side !== null)) problems.push(`${where}: boundary ${entry.boundary}/${JSON.stringify(entry.boundary_side)}, the re-fit finds ${JSON.stringify(r.boundarySide)}`);
    const rel = Math.abs(entry.temperature - r.temperature) / r.temperature;
    if (!(rel <= REFIT_REL_TOL)) problems.push(`${where}: temperature ${entry.temperature}, re-fit ${r.temperature} (relative difference ${rel.toExponential(1)})`);
    if (!(Math.abs(entry.temperature - 1 / entry.beta) <= 4e-16 * entry.temperature)) problems.push(`${where}: temperature is not 1/beta`);
    if (!(Math.abs(entry.calibration_nll_after - after) <= METRIC_TOL)) problems.push(`${where}: calibration_nll_after ${entry.calibration_nll_after}, recomputed ${after}`);
    if (!(Math.abs(entry.audit_nll - auditNll) <= METRIC_TOL)) problems.push(`${where}: audit_nll ${entry.audit_nll}, recomputed ${auditNll}`);
    if (m === cal.n && !(Math.abs(entry.temperature - main) <= 1e-12 * main)) problems.push(`${where} is the whole pool, yet its temperature ${entry.temperature} differs from temperature.json's ${main}`);
    await yieldToPage();
  }
  if (problems.length) throw new bag.Failed(`stability differs from the logits: ${problems.slice(0, 3).join('; ')}.`);
  const temps = doc.sizes.map((e) => `m=${e.m}: T=${e.temperature.toFixed(4)}`).join(', ');
  return `${doc.sizes.length} nested subsets re-fitted by the protocol's bisection within ${REFIT_REL_TOL.toExponential(0)} relative; NLLs within ${METRIC_TOL} (${temps || 'none fitted'})`;
}

/** Every claim of the signed predicate restates the payload, this page's schemas and the signer. */
async function predicateClaims(ctx) {
  ctx.doc('predicate');
  const env = ctx.need(ctx.envelope, 'the envelope');
  const predicate = parseRaw(env.payload, 'the signed statement').get('predicate');
  const [protocol, temperature] = await Promise.all([ctx.sha('data/protocol.json'), ctx.sha('data/temperature.json')]);
  const schemas = PAYLOAD_SCHEMAS.map(([path, name]) => ({ path, name, id: schemaId(name), sha256: SCHEMA_SHA256[name], present: ctx.bag.files.has(path) }))
    .sort((a, b) => (a.path < b.path ? -1 : 1));
  return checkClaims(predicate, {
    records: { resources: ctx.rawOf('data/resources.json'), temperature: ctx.rawOf('data/temperature.json'), metrics: ctx.rawOf('data/metrics.json') },
    shas: { protocol, temperature }, schemas, released: FORMAT_DIGESTS, signer: ctx.need(ctx.signer, 'the signer').fingerprint,
  });
}

// -- the crate ---------------------------------------------------------------------------------

function crateStructure(ctx) {
  const data = ctx.bag.files.get('data/ro-crate-metadata.json');
  if (!data) throw new bag.Failed('data/ro-crate-metadata.json is missing.');
  const [detail, graph] = parseCrate(data);
  ctx.crateGraph = graph;
  return detail;
}

async function crateFiles(ctx) {
  const graph = ctx.need(ctx.crateGraph, 'the crate graph');
  const payload = bag.payload(ctx.bag);
  const files = new Map(payload.map((p) => [p, ctx.bag.files.get(p)]));
  const shas = new Map(await Promise.all(payload.map(async (p) => [p, await ctx.sha(p)])));
  return checkFiles(graph, files, shas);
}

function crateRun(ctx) {
  const graph = ctx.need(ctx.crateGraph, 'the crate graph');
  return checkRun(graph, bag.payload(ctx.bag), ctx.doc('data/resources.json'), ctx.doc('data/environment.json'));
}

function crateSigner(ctx) {
  const graph = ctx.need(ctx.crateGraph, 'the crate graph');
  const info = ctx.need(ctx.info, 'bag-info.txt');
  return checkSigner(graph, ctx.need(ctx.signer, 'the signer').fingerprint, info['Bagging-Date']);
}

function cratePublication(ctx) {
  const graph = ctx.need(ctx.crateGraph, 'the crate graph');
  return checkPublication(graph, ctx.doc('predicate').publication);
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 255] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** (width, height) of a well-formed PNG: signature, chunks with right CRCs, IHDR first, IDAT, IEND last. */
function checkPng(data, name) {
  const signature = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (data.length < 8 || signature.some((b, k) => data[k] !== b)) throw new bag.Failed(`${name} does not start with the PNG signature.`);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const kinds = [];
  let size = [0, 0];
  let pos = 8;
  while (pos < data.length) {
    if (pos + 12 > data.length) throw new bag.Failed(`${name} ends inside a chunk header at byte ${pos}.`);
    const length = view.getUint32(pos);
    const kind = String.fromCharCode(...data.subarray(pos + 4, pos + 8));
    if (pos + 12 + length > data.length) throw new bag.Failed(`${name}: chunk ${kind} at byte ${pos} runs past the end.`);
    if (crc32(data.subarray(pos + 4, pos + 8 + length)) !== view.getUint32(pos + 8 + length)) throw new bag.Failed(`${name}: chunk ${kind} at byte ${pos} has a wrong CRC.`);
    if (kind === 'IHDR' && length === 13) size = [view.getUint32(pos + 8), view.getUint32(pos + 12)];
    kinds.push(kind);
    pos += 12 + length;
  }
  if (!kinds.length || kinds[0] !== 'IHDR' || kinds[kinds.length - 1] !== 'IEND' || !kinds.includes('IDAT')) throw new bag.Failed(`${name} is not a complete PNG (IHDR first, IDAT, IEND last).`);
  if (!(size[0] > 0 && size[1] > 0)) throw new bag.Failed(`${name} has an empty image (${size[0]}x${size[1]}).`);
  return size;
}

function pngCheck(ctx) {
  const sizes = ['data/figures/confidence-audit.png', 'data/figures/reliability-audit.png'].map((p) => {
    const data = ctx.bag.files.get(p);
    if (!data) throw new bag.Failed(`${p} is missing.`);
    const [w, h] = checkPng(data, p);
    return `${p.split('/').pop()} ${w}x${h}`;
  });
  return `well-formed PNG: ${sizes.join(', ')}`;
}

// -- the table ----------------------------------------------------------------------------------

const has = (ctx, path, key) => {
  const d = ctx.docs.get(path);
  return Boolean(d && typeof d === 'object' && key in d);
};
const wants = (ctx, section) => has(ctx, 'data/protocol.json', section) || Boolean(ctx.bag && ctx.bag.files.has(SECTION_FILES[section]));

/** [id, title, check or null (not performed here), {auth, when, each}] in the Python verifier's order. */
const TABLE = [
  ['archive.safe', 'archive extracts safely', archiveSafe, { auth: true, first: true, when: (c) => c.input.kind === 'archive' }],
  ['bag.layout', 'tag files and data/, no links', layoutCheck, { auth: true, first: true, when: (c) => c.bag || c.input.kind !== 'archive' }],
  ['bag.declaration', 'bagit.txt declares BagIt 1.0', (c) => bag.declaration(c.bag), { auth: true, when: (c) => c.bag }],
  ['bag.manifest-sha256', 'manifest-sha256.txt matches every payload file', manifestSha256, { auth: true, when: (c) => c.bag }],
  ['bag.manifest-sha512', 'manifest-sha512.txt matches every payload file', async (c) => (await bag.manifest(c.bag, bag.TAG.sha512, 'sha512')).detail, { auth: true, when: (c) => c.bag }],
  ['bag.manifest-other', 'other payload manifests match', manifestOther, { auth: true, when: (c) => c.bag }],
  ['bag.tagmanifest', 'tag manifests match every tag file', (c) => bag.tagmanifests(c.bag, c.notes), { auth: true, when: (c) => c.bag }],
  ['bag.info', 'bag-info.txt well formed, Payload-Oxum right', infoCheck, { auth: true, when: (c) => c.bag }],
  ['signature.envelope', 'DSSE envelope well formed', envelopeCheck, { auth: true }],
  ['signature.valid', 'signature verifies over the exact statement bytes', validCheck, { auth: true }],
  ['format.version', 'bundle format is one this verifier reads', formatVersion, { auth: true }],
  ['signature.subjects', 'signed subjects equal the manifest and the files', subjectsCheck, { auth: true }],
  ['signature.signer-trusted', 'signer is the trusted key', trustedCheck, { auth: true }],
  ['bag.payload-files', "data/ holds exactly the format's files", payloadFiles, { when: (c) => c.bag }],
  ['json.{name}', "{path} valid against the verifier's schema", jsonFile, { each: jsonFiles }],
  ['json.statement', "signed statement valid against the verifier's schema", statementCheck, {}],
  ['format.fields', 'records hold every field their format requires', formatFields, {}],
  ['protocol.bounds', "protocol's sizes within the verifier's bounds", protocolBounds, {}],
  ['protocol.hash', 'every record names the protocol in the bag', protocolHash, {}],
  ['resources.pins', "resources agree with the protocol's pins and the profile", resourcePins, {}],
  ['stages.records', 'stage records hash the files in the bag', stagesRecords, {}],
  ['stages.audit-after-fit', 'audit inference consumed the frozen temperature', auditAfterFit, {}],
  ['environment.threads', "torch threads within the protocol's bound", threadsCheck, { when: (c) => has(c, 'data/environment.json', 'threads') }],
  ['environment.forward', 'the recorded forward and its check agree', forwardCheck, { when: (c) => has(c, 'data/environment.json', 'forward_choice') }],
  ['pools.split-keys', 'split keys are sha256(prefix + idx)', splitKeys, {}],
  ['pools.assignment', 'pools re-derived by the split rule; sizes; disjoint', assignment, {}],
  ['predictions.{pool}.columns', '{pool} predictions: columns and types', columns, { each: () => POOLS.map((pool) => ({ pool })) }],
  ['predictions.{pool}.rows', '{pool} predictions: rows are the pool, in order', rowsCheck, { each: () => POOLS.map((pool) => ({ pool })), group: 'predictions' }],
  ['predictions.{pool}.probabilities', '{pool} predictions: probabilities and pred from the logits', probabilitiesCheck, { each: () => POOLS.map((pool) => ({ pool })), group: 'predictions' }],
  ['predictions.{pool}.batches', '{pool} predictions: batches in protocol order', batchesCheck, { each: () => POOLS.map((pool) => ({ pool })), group: 'predictions' }],
  ['cluster.batch-owners', 'every recorded batch ran on exactly one worker', batchOwners, { when: (c) => has(c, 'data/environment.json', 'cluster') && c.docs.get('data/environment.json').cluster !== null }],
  ['cluster.audit-temperature', "audit batches carried the frozen temperature's hash", auditTemperature, { when: (c) => has(c, 'data/environment.json', 'cluster') && c.docs.get('data/environment.json').cluster !== null }],
  ['labels.map', "label map is a bijection onto the dataset's labels", labelMap, { when: (c) => has(c, 'data/protocol.json', 'label_map') }],
  ['fit.record', 'temperature record consistent with protocol and logits', fitRecord, {}],
  ['fit.trajectory', 'trajectory is a valid bisection of the NLL gradient', trajectoryCheck, {}],
  ['fit.refit', 'temperature re-fitted by another method agrees', refit, {}],
  ['metrics.record', 'metrics name the temperature and predictions in the bag', metricsRecord, {}],
  ['metrics.{pool}.{which}', '{pool} {which} metrics recomputed', metricsCheck, { each: () => POOLS.flatMap((pool) => ['raw', 'calibrated'].map((which) => ({ pool, which }))) }],
  ['metrics.argmax', 'argmax unchanged by the temperature', argmaxCheck, {}],
  ['metrics.warnings', 'warnings are those the audit accuracy and temperature call for', warningsCheck, {}],
  ['metrics.per-class', 'per-class results recomputed; best relabelling certified', perClassCheck, {}],
  ['metrics.reproduction-bounds', 'what an equivalent reproduction can move, derived from the logits', reproductionBounds, {}],
  ['reproduction.tolerance', 'pre-registered logit tolerance within what the reader accepts', toleranceCheck, {}],
  // listed when metrics.json holds a truncation summary, or could not be read (the check then says why)
  ['metrics.truncation', "truncation summary restates the predictions' token counts", truncationCheck, { when: (c) => !c.docs.has('data/metrics.json') || has(c, 'data/metrics.json', 'truncation') }],
  ['metrics.estimators', 'pre-registered estimators recomputed with their intervals', estimatorsCheck, { when: (c) => !c.docs.has('data/protocol.json') || !c.docs.has('data/metrics.json') || has(c, 'data/metrics.json', 'estimators') || Boolean((c.docs.get('data/protocol.json').metrics || {}).estimators) }],
  ['bootstrap.record', 'bootstrap names this protocol, temperature and predictions', bootstrapRecord, { when: (c) => wants(c, 'bootstrap') }],
  ['bootstrap.intervals', 'bootstrap resamples and intervals recomputed', bootstrapIntervals, { when: (c) => wants(c, 'bootstrap') }],
  ['stability.refit', 'stability subsets re-fitted and NLLs recomputed', stabilityRefit, { when: (c) => wants(c, 'stability') }],
  ['predicate.claims', 'signed predicate states what the payload holds', predicateClaims, {}],
  ['report.tables', 'report.md tables restate the records', reportTables, {}],
  ['report.regenerated', "report.md is the verifier's rendering of the records", null, {}],
  ['crate.structure', 'ro-crate-metadata.json is an RO-Crate 1.2 graph', crateStructure, {}],
  ['crate.files', 'crate lists every payload file with its sha256 and size', crateFiles, {}],
  ['crate.run', "crate's run reads the resources and produces the payload", crateRun, {}],
  ['crate.signer', "crate names the bag's signer", crateSigner, {}],
  ['crate.publication', 'crate states the signed licence, publisher and authors', cratePublication, {}],
  ['crate.regenerated', "crate is the verifier's rendering of the records", null, {}],
  ['figures.png', 'figures are well-formed PNG images', pngCheck, {}],
  ['figures.regenerated', "figures are the verifier's drawing of the records", null, {}],
];

/** Give the browser a turn (paint, input) and come back at once. Not setTimeout: a timeout set from
 * a timeout's task is clamped to 4 ms after five levels, 0.25 s over the table's 66 checks. */
function yieldToPage() {
  if (globalThis.scheduler && typeof globalThis.scheduler.yield === 'function') return globalThis.scheduler.yield();
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => {
      channel.port1.close();
      resolve();
    };
    channel.port2.postMessage(null);
  });
}

/** The check ids and titles this page knows, in order, templates unexpanded (for the tests). */
export const CHECK_IDS = TABLE.map(([id, title, fn]) => ({ id, title, performed: Boolean(fn) }));

const fill = (text, params) => text.replace(/\{(\w+)\}/g, (_, k) => params[k]);

/**
 * Run every check on `input` ({kind, bag, failure, detail}) under `trust`. Returns {checks:
 * [{id, title, status: pass|fail|skip|not-checked, detail}], verdict, message, notes, figures,
 * documents}. Never throws for bad input: an unexpected error in a check is that check's failure.
 */
export async function verify(given, trust) {
  const input = given.bag ? { ...given, bag: applyCaps(given.bag) } : given;
  const ctx = new Context(input, trust);
  const unread = new Context({ ...input, bag: input.bag ? { files: new Map(), dirs: new Set() } : null }, trust);
  const checks = [];
  let authenticated = true;
  let failedAt = null;
  for (const [id, title, fn, opts] of TABLE) {
    const where = authenticated ? ctx : unread;
    if (opts.when && !opts.when(where)) continue;
    for (const params of opts.each ? opts.each(where) : [{}]) {
      const row = { id: fill(id, params), title: fill(title, params) };
      if (!authenticated && !(opts.first && id === 'archive.safe')) {
        checks.push({ ...row, status: 'skip', detail: `skipped: the bundle is not authenticated (${failedAt} failed)` });
        continue;
      }
      if (!fn) {
        checks.push({ ...row, status: 'not-checked', detail: NOT_HERE });
        continue;
      }
      // Let the page paint and take input between checks: no one check holds the tab for long.
      await yieldToPage();
      let status;
      let detail;
      const t0 = performance.now();
      try {
        detail = await fn(ctx, params);
        status = detail === null ? 'not-checked' : 'pass';
        if (detail === null) detail = NOT_HERE;
      } catch (e) {
        if (e instanceof Skip) [status, detail] = ['skip', e.message];
        else if (e instanceof bag.Failed) [status, detail] = ['fail', e.message];
        else [status, detail] = ['fail', `could not be checked: ${e && e.name}: ${String(e && e.message).slice(0, 300)}`];
      }
      checks.push({ ...row, status, detail, ms: Math.round(performance.now() - t0) });
      if (status === 'fail' && opts.auth) {
        authenticated = false;
        failedAt = row.id;
      }
    }
  }
  const failed = checks.some((c) => c.status === 'fail');
  const skipped = checks.filter((c) => c.status === 'skip').map((c) => c.id);
  let verdict = 'failed';
  if (!failed && !skipped.length) verdict = 'verified';
  else if (!failed && skipped.length === 1 && skipped[0] === 'signature.signer-trusted') verdict = 'intact-signer-unknown';
  // A folder is never VERIFIED here: the browser hides its symbolic links from the page (FOLDER_LINKS).
  const partial = verdict !== 'failed' && (checks.some((c) => c.status === 'not-checked') || input.kind === 'folder');
  const message = partial ? `${PARTIAL[verdict]}${input.kind === 'folder' ? ` ${FOLDER_LINKS}` : ''}` : VERDICTS[verdict];
  return {
    checks, verdict: partial ? `${verdict}-here` : verdict, message, notes: ctx.notes, figures: ctx.figures,
    documents: Object.fromEntries(ctx.docs), tables: ctx.tables, statement: ctx.statement || null,
    signer: ctx.signer ? ctx.signer.fingerprint : null,
  };
}
