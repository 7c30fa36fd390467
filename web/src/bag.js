// BagIt 1.0 as bundle/FORMAT.md profiles RFC 8493: layout, declaration, payload and tag manifests,
// bag-info.txt and Payload-Oxum; read as the RFC allows (either hex case, spaces or a tab, any line
// order, LF, CR or CRLF). Each function takes the bag ({files: Map(path -> bytes), dirs: Set}) and
// returns the reason it passed, or throws Failed with one sentence.

import { sha } from './digest.js';

export class Failed extends Error {}

export const TAG = Object.freeze({
  bagit: 'bagit.txt', info: 'bag-info.txt', sha256: 'manifest-sha256.txt', sha512: 'manifest-sha512.txt',
  provenance: 'provenance.intoto.json', signer: 'signer.pub.pem', tagmanifest: 'tagmanifest-sha256.txt',
});
const TAG_FILES = new Set(Object.values(TAG));
const REQUIRED = [TAG.bagit, TAG.info, TAG.sha256, TAG.sha512, TAG.tagmanifest];
const MANIFEST_FILE = /^(tag)?manifest-([A-Za-z0-9_-]+)\.txt$/;
const MANIFEST_LINE = /^([0-9A-Fa-f]+)([ \t]+)(\S.*)$/s;
const INFO_LABELS = ['Bagging-Date', 'Payload-Oxum', 'External-Description', 'Protocol-SHA256', 'Profile', 'Signer-Fingerprint'];
// WebCrypto's digests; a manifest in any other algorithm is left to the Python verifier.
export const ALGORITHMS = { sha1: 'SHA-1', sha256: 'SHA-256', sha384: 'SHA-384', sha512: 'SHA-512' };

const dec = new TextDecoder('utf-8', { fatal: true });
const q = (s) => `'${s}'`;

export function text(bytes, name) {
  try {
    return dec.decode(bytes);
  } catch {
    throw new Failed(`${name} is not UTF-8.`);
  }
}

/** The lines of a tag file, ended by LF, CR or CRLF; a missing final line end is accepted. */
export function tagLines(s) {
  const lines = s.split(/\r\n|\r|\n/);
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

export const payload = (bag) => [...bag.files.keys()].filter((p) => p.startsWith('data/')).sort();

/** name -> algorithm of every (tag)manifest-<alg>.txt at the root. */
export function manifests(bag, tag) {
  const out = new Map();
  for (const name of [...bag.files.keys()].sort()) {
    const m = MANIFEST_FILE.exec(name);
    if (m && Boolean(m[1]) === tag) out.set(name, m[2]);
  }
  return out;
}

export function algorithmOf(alg) {
  return ALGORITHMS[alg.toLowerCase().replace(/-/g, '')] || null;
}

export function layout(bag, notes) {
  const problems = [];
  if (bag.oversized && bag.oversized.length) problems.push(`files over their size cap ${JSON.stringify(bag.oversized.slice(0, 5))}`);
  const top = new Set([...bag.files.keys()].filter((p) => !p.includes('/')));
  const named = new Set([...manifests(bag, false).keys(), ...manifests(bag, true).keys()]);
  const extra = [...bag.files.keys()].filter((p) => !p.startsWith('data/') && !TAG_FILES.has(p) && !named.has(p)).sort();
  extra.slice(0, 20).forEach((p) => notes.push(`extra tag file ${p} (not signed; ignored)`));
  const missing = REQUIRED.filter((t) => !top.has(t)).sort();
  if (missing.length) problems.push(`missing tag files ${JSON.stringify(missing)}`);
  if (!bag.dirs.has('data')) problems.push('no data/ folder');
  const signed = [TAG.provenance, TAG.signer].filter((t) => top.has(t));
  if (signed.length === 1) problems.push(`${signed[0]} without its partner`);
  if (problems.length) throw new Failed(`the bag layout is wrong: ${problems.join('; ')}.`);
  return `${top.size} tag files and data/${extra.length ? `, ${extra.length} extra tag files (noted)` : ''}`;
}

export function declaration(bag) {
  const data = bag.files.get(TAG.bagit);
  if (!data) throw new Failed('bagit.txt is missing; this folder is not a BagIt bag.');
  const want = 'BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n';
  let got = null;
  try {
    got = dec.decode(data);
  } catch { /* not UTF-8: not the declaration */ }
  if (got !== want) throw new Failed('bagit.txt is not exactly the BagIt 1.0 declaration.');
  return 'BagIt-Version 1.0, UTF-8 tag files';
}

function safePath(path, where) {
  if (!path || path.startsWith('/') || path.includes('\\') || path.split('/').some((p) => p === '' || p === '.' || p === '..')) {
    throw new Failed(`${where} lists the path ${q(path)}, which is absolute, empty or escapes the bag; the manifest has been tampered with.`);
  }
  if (/[\x00-\x1f\x7f%]/.test(path)) throw new Failed(`${where} lists the path ${q(path)}, which holds a control character or '%'.`);
  return path;
}

const HEX_LEN = { 'SHA-1': 40, 'SHA-256': 64, 'SHA-384': 96, 'SHA-512': 128 };

/** path -> lowercase hex of a (tag) manifest, each path once, each digest of the right length. */
export function parseManifest(bytes, name, algorithm) {
  const hexLen = HEX_LEN[algorithm];
  const entries = new Map();
  tagLines(text(bytes, name)).forEach((line, k) => {
    const m = MANIFEST_LINE.exec(line);
    if (!m || m[1].length !== hexLen) throw new Failed(`${name} line ${k + 1} is not '<${hexLen} hex digits>', spaces or a tab, '<path>'.`);
    const path = safePath(m[3], `${name} line ${k + 1}`);
    if (entries.has(path)) throw new Failed(`${name} lists ${q(path)} twice (line ${k + 1}).`);
    entries.set(path, m[1].toLowerCase());
  });
  return entries;
}

async function compare(bag, entries, expected, name, algorithm) {
  const absent = [...entries.keys()].filter((p) => !bag.files.has(p)).sort();
  if (absent.length) throw new Failed(`${name} lists ${JSON.stringify(absent.slice(0, 5))}, which are not files in the bag.`);
  const missing = [...expected].filter((p) => !entries.has(p)).sort();
  if (missing.length) throw new Failed(`${name} does not list ${JSON.stringify(missing.slice(0, 5))}, which are in the bag.`);
  // All digests at once: WebCrypto computes them off the page's thread, in parallel where it can.
  const paths = [...entries.keys()].sort();
  const digests = await Promise.all(paths.map((path) => sha(algorithm, bag.files.get(path))));
  for (const [k, path] of paths.entries()) {
    const found = digests[k];
    if (found !== entries.get(path)) {
      throw new Failed(`${algorithm} mismatch for ${q(path)}: ${name} says ${entries.get(path).slice(0, 16)}…, the file hashes to ${found.slice(0, 16)}…; the file or the manifest was changed.`);
    }
  }
}

/** A payload manifest lists exactly the payload files, each with its right digest. */
export async function manifest(bag, name, alg) {
  if (!bag.files.has(name)) throw new Failed(`${name} is missing.`);
  const algorithm = algorithmOf(alg);
  const entries = parseManifest(bag.files.get(name), name, algorithm);
  const outside = [...entries.keys()].filter((p) => !p.startsWith('data/'));
  if (outside.length) throw new Failed(`${name} lists ${JSON.stringify(outside.slice(0, 5))} outside data/.`);
  const files = new Set(payload(bag));
  const extra = [...entries.keys()].filter((p) => !files.has(p)).sort();
  if (extra.length) throw new Failed(`${name} lists ${JSON.stringify(extra.slice(0, 5))}, which are not files in the bag.`);
  await compare(bag, entries, files, name, algorithm);
  return { detail: `${entries.size} payload files listed, every ${alg} matches`, entries };
}

/** Every tagmanifest-<alg>.txt lists tag files with their digests; the sha256 one lists them all. */
export async function tagmanifests(bag, notes) {
  const found = manifests(bag, true);
  if (!found.has(TAG.tagmanifest)) throw new Failed(`${TAG.tagmanifest} is missing.`);
  const ours = new Set([...bag.files.keys()].filter((p) => TAG_FILES.has(p) && p !== TAG.tagmanifest));
  const checked = [];
  for (const [name, alg] of found) {
    const algorithm = algorithmOf(alg);
    if (!algorithm) {
      notes.push(`${name} uses '${alg}', which this page cannot compute; not checked`);
      continue;
    }
    const entries = parseManifest(bag.files.get(name), name, algorithm);
    const inside = [...entries.keys()].filter((p) => p.startsWith('data/'));
    if (inside.length) throw new Failed(`${name} lists payload files ${JSON.stringify(inside.slice(0, 5))}; a tag manifest lists tag files.`);
    await compare(bag, entries, name === TAG.tagmanifest ? ours : new Set(), name, algorithm);
    checked.push(`${name} (${entries.size} files)`);
  }
  return `every digest matches: ${checked.join(', ')}`;
}

/** bag-info.txt: the format's labels once each, Payload-Oxum, date and hex formats. */
export function info(bag, notes) {
  const data = bag.files.get(TAG.info);
  if (!data) throw new Failed('bag-info.txt is missing.');
  const entries = [];
  tagLines(text(data, 'bag-info.txt')).forEach((line, k) => {
    if ((line[0] === ' ' || line[0] === '\t') && entries.length) {
      const last = entries[entries.length - 1];
      last[1] = `${last[1]} ${line.trim()}`.trim();
      return;
    }
    const at = line.indexOf(':');
    const label = at < 0 ? '' : line.slice(0, at);
    if (at < 0 || !label || label !== label.trim()) throw new Failed(`bag-info.txt line ${k + 1} is not 'Label: value'.`);
    entries.push([label, line.slice(at + 1).trim()]);
  });
  const found = {};
  for (const [label, value] of entries) {
    if (INFO_LABELS.includes(label) && label !== 'External-Description') {
      if (label in found) throw new Failed(`bag-info.txt gives ${label} twice.`);
      found[label] = value;
    } else notes.push(`bag-info.txt ${label}: '${value.slice(0, 200)}' (not signed; shown as written)`);
  }
  const required = ['Bagging-Date', 'Payload-Oxum', 'Protocol-SHA256', 'Profile'];
  if (bag.files.has(TAG.provenance)) required.push('Signer-Fingerprint');
  const missing = required.filter((l) => !(l in found));
  if (missing.length) throw new Failed(`bag-info.txt lacks ${JSON.stringify(missing)}.`);
  if (!/^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(found['Bagging-Date'])) throw new Failed(`bag-info.txt Bagging-Date is '${found['Bagging-Date']}', expected YYYY-MM-DD.`);
  const files = payload(bag);
  const oxum = `${files.reduce((n, p) => n + bag.files.get(p).length, 0)}.${files.length}`;
  if (found['Payload-Oxum'] !== oxum) throw new Failed(`bag-info.txt Payload-Oxum is '${found['Payload-Oxum']}', the payload is ${oxum} (octets.files).`);
  for (const label of ['Protocol-SHA256', 'Signer-Fingerprint']) {
    if (label in found && !/^[0-9a-f]{64}$/.test(found[label])) throw new Failed(`bag-info.txt ${label} is not 64 lowercase hex digits.`);
  }
  if (!['formal', 'other'].includes(found.Profile)) throw new Failed(`bag-info.txt Profile is '${found.Profile}', expected formal or other.`);
  return { detail: `Payload-Oxum ${oxum}, Bagging-Date ${found['Bagging-Date']}`, info: found };
}
