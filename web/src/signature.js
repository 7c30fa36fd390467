// The DSSE envelope (PAE, Ed25519 through WebCrypto), the in-toto statement's subjects and the
// trusted keys, written again from bundle/FORMAT.md ("Statement", "Several signatures").

import { Failed } from './bag.js';
import { hex, sha256 } from './digest.js';
import { parse } from './json.js';

export const PAYLOAD_TYPE = 'application/vnd.in-toto+json';
export const STATEMENT_TYPE = 'https://in-toto.io/Statement/v1';
export const PREDICATE_TYPE = 'https://calibration-runs.example/predicate/temperature-calibration/v1';
const MAX_SIGNATURES = 100;
// SubjectPublicKeyInfo of an Ed25519 key: this 12-byte prefix, then the 32 raw key bytes.
const SPKI_PREFIX = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

function unb64(value, what) {
  if (typeof value !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(value) || value.length % 4) {
    throw new Failed(`the envelope's ${what} is not valid base64.`);
  }
  const raw = Uint8Array.from(atob(value), (c) => c.charCodeAt(0));
  if (b64(raw) !== value) {
    throw new Failed(`the envelope's ${what} is not canonical base64 (its padding bits are not zero).`);
  }
  return raw;
}

function b64(bytes) {
  let s = '';
  for (let k = 0; k < bytes.length; k += 0x8000) s += String.fromCharCode(...bytes.subarray(k, k + 0x8000));
  return btoa(s);
}

/** PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in bytes. */
export function pae(type, body) {
  const t = new TextEncoder().encode(type);
  const head = new TextEncoder().encode(`DSSEv1 ${t.length} ${type} ${body.length} `);
  const out = new Uint8Array(head.length + body.length);
  out.set(head);
  out.set(body, head.length);
  return out;
}

/** The envelope's exact shape: {payload: bytes, payloadType, signatures: [{keyid, sig: bytes}]}. */
export function parseEnvelope(doc, source) {
  if (!doc || typeof doc !== 'object' || Array.isArray(doc) || Object.keys(doc).sort().join() !== 'payload,payloadType,signatures') {
    throw new Failed(`${source} is not a DSSE envelope with exactly payload, payloadType and signatures.`);
  }
  if (doc.payloadType !== PAYLOAD_TYPE) throw new Failed(`payloadType is '${doc.payloadType}', expected '${PAYLOAD_TYPE}'.`);
  const sigs = doc.signatures;
  if (!Array.isArray(sigs) || sigs.length < 1 || sigs.length > MAX_SIGNATURES) throw new Failed(`the envelope has ${Array.isArray(sigs) ? sigs.length : 'no list of'} signatures, expected 1 to ${MAX_SIGNATURES}.`);
  const signatures = sigs.map((s, k) => {
    if (!s || typeof s !== 'object' || Object.keys(s).sort().join() !== 'keyid,sig' || typeof s.keyid !== 'string') {
      throw new Failed(`the envelope's signature ${k} must hold exactly a keyid string and a sig.`);
    }
    return { keyid: s.keyid, sig: unb64(s.sig, `signature ${k}`) };
  });
  return { payload: unb64(doc.payload, 'payload'), payloadType: doc.payloadType, signatures };
}

/** An Ed25519 public key from a SubjectPublicKeyInfo PEM holding exactly one PEM block:
 * {key: CryptoKey, raw: bytes, fingerprint: sha256 hex of raw}. */
export async function readPublicKey(pemText, source) {
  const blocks = pemText.split('-----BEGIN ').length - 1;
  if (blocks !== 1) throw new Failed(`${source} must hold exactly one PEM block.`);
  const m = /-----BEGIN PUBLIC KEY-----([A-Za-z0-9+/=\s]+)-----END PUBLIC KEY-----/.exec(pemText);
  if (!m) throw new Failed(`${source} is not a PEM public key.`);
  let der;
  try {
    der = Uint8Array.from(atob(m[1].replace(/\s+/g, '')), (c) => c.charCodeAt(0));
  } catch {
    throw new Failed(`${source} is not a PEM public key (bad base64).`);
  }
  if (der.length !== 44 || SPKI_PREFIX.some((b, k) => der[k] !== b)) throw new Failed(`${source} is not an Ed25519 public key.`);
  const raw = der.subarray(12);
  const key = await crypto.subtle.importKey('raw', raw, { name: 'Ed25519' }, false, ['verify']);
  return { key, raw, fingerprint: await sha256(raw) };
}

/** The index of the first signature `key` made over PAE of the envelope, or -1 (keyid a hint only). */
export async function signatureBy(env, key) {
  const message = pae(env.payloadType, env.payload);
  const order = [...env.signatures.keys()].sort((a, b) => (env.signatures[a].keyid !== key.fingerprint) - (env.signatures[b].keyid !== key.fingerprint));
  for (const k of order) {
    const { sig } = env.signatures[k];
    if (sig.length === 64 && (await crypto.subtle.verify({ name: 'Ed25519' }, key.key, sig, message))) return k;
  }
  return -1;
}

/** The statement as in-toto Statement v1 reads it, and name -> {alg: hex} of its subjects. */
export function parseStatement(payload) {
  const statement = parse(payload, 'The signed statement');
  if (!statement || typeof statement !== 'object' || Array.isArray(statement)) throw new Failed('the signed statement is not a JSON object.');
  const known = ['_type', 'subject', 'predicateType', 'predicate'];
  const missing = known.filter((k) => !(k in statement));
  if (missing.length) throw new Failed(`the statement lacks ${JSON.stringify(missing)}.`);
  if (statement._type !== STATEMENT_TYPE) throw new Failed(`the statement _type is not '${STATEMENT_TYPE}'.`);
  if (statement.predicateType !== PREDICATE_TYPE) throw new Failed(`the predicateType is not '${PREDICATE_TYPE}'.`);
  if (!statement.predicate || typeof statement.predicate !== 'object' || Array.isArray(statement.predicate)) throw new Failed("the statement's predicate is not a JSON object.");
  if (!Array.isArray(statement.subject)) throw new Failed("the statement's subject is not a list.");
  const digests = new Map();
  statement.subject.forEach((item, k) => {
    const d = item && typeof item === 'object' ? item.digest : null;
    if (!item || typeof item !== 'object' || typeof item.name !== 'string' || !d || typeof d !== 'object' || Array.isArray(d)
      || !Object.values(d).every((v) => typeof v === 'string' && /^[0-9a-fA-F]+$/.test(v)) || !/^[0-9a-f]{64}$/.test(String(d.sha256))) {
      throw new Failed(`statement subject ${k} is not {name, digest: {sha256: lowercase hex, ...}}.`);
    }
    if (digests.has(item.name)) throw new Failed(`the statement names '${item.name}' twice.`);
    digests.set(item.name, Object.fromEntries(Object.entries(d).map(([a, v]) => [a, v.toLowerCase()])));
  });
  const read = Object.fromEntries(known.map((k) => [k, statement[k]]));
  read.subject = [...digests].map(([name, d]) => ({ name, digest: { sha256: d.sha256 } }));
  return { statement: read, digests };
}

export { hex };
