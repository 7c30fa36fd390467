// The page: take a bundle (archive or folder) and the trusted key, run the checks, show the
// verdict table, then the bundle as its reader sees it. Nothing from a bundle is ever interpreted
// as HTML: every text goes in through textContent, the diagrams are built node by node.

import { LIMITS, readArchive, Refused, Unreadable } from './archive.js';
import { NOT_HERE, verify } from './checks.js';
import { readPublicKey } from './signature.js';

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

/** The trust the reader gave: a pasted PEM, or a fingerprint in the URL fragment (#fingerprint=HEX). */
async function readTrust() {
  const pem = $('key').value.trim();
  if (pem) {
    const key = await readPublicKey(pem, 'the trusted key');
    return { keys: [{ ...key, source: 'the pasted key' }], threshold: 1, fingerprint: null };
  }
  const m = /(?:^|[#&])fingerprint=([0-9a-fA-F:]+)/.exec(window.location.hash);
  if (m) {
    const fp = m[1].toLowerCase().replace(/:/g, '');
    if (!/^[0-9a-f]{64}$/.test(fp)) throw new Error('the fingerprint in the address is not 64 hex digits (the sha256 of the raw Ed25519 public key); fix the link.');
    return { keys: [], threshold: 1, fingerprint: fp };
  }
  return { keys: [], threshold: 1, fingerprint: null };
}

/** A bag folder chosen or dropped: {files, dirs} relative to its root, within the format's limits. */
async function readFolder(list) {
  const entries = [...list].filter((f) => f.webkitRelativePath || f.relativePath);
  if (entries.length > LIMITS.members) throw new Refused(`the folder holds more than ${LIMITS.members} files; a bundle holds about 25.`);
  let total = 0;
  for (const f of entries) {
    if (f.size > LIMITS.fileBytes) throw new Refused(`${f.webkitRelativePath} is ${f.size} bytes, over the ${LIMITS.fileBytes}-byte limit for one file.`);
    total += f.size;
  }
  if (total > LIMITS.totalBytes) throw new Refused(`the folder holds more than ${LIMITS.totalBytes} bytes; refusing it.`);
  const files = new Map();
  const dirs = new Set();
  for (const f of entries) {
    const parts = (f.webkitRelativePath || f.relativePath).split('/').slice(1);
    const path = parts.join('/');
    for (let k = 1; k < parts.length; k++) dirs.add(parts.slice(0, k).join('/'));
    files.set(path, new Uint8Array(await f.arrayBuffer()));
  }
  return { files, dirs };
}

function reliability(title, bins) {
  const W = 260;
  const P = 30;
  const s = svg('svg', { viewBox: `0 0 ${W + P + 10} ${W + P + 20}`, width: W + P + 10, height: W + P + 20, role: 'img' });
  s.append(svg('title', {}, title));
  s.append(svg('rect', { x: P, y: 10, width: W, height: W, fill: '#fff', stroke: '#999' }));
  s.append(svg('line', { x1: P, y1: 10 + W, x2: P + W, y2: 10, stroke: '#bbb', 'stroke-dasharray': '4 3' }));
  bins.forEach((b, i) => {
    if (b.accuracy === null) return;
    const h = b.accuracy * W;
    s.append(svg('rect', { x: P + (i * W) / 10 + 1, y: 10 + W - h, width: W / 10 - 2, height: h, fill: '#4a78b0' }));
    const c = b.mean_confidence * W;
    s.append(svg('circle', { cx: P + (i * W) / 10 + W / 20, cy: 10 + W - c, r: 3, fill: '#d9822b' }));
  });
  s.append(svg('text', { x: P + W / 2, y: W + P + 12, 'text-anchor': 'middle', 'font-size': 11 }, 'confidence'));
  s.append(svg('text', { x: 4, y: 20, 'font-size': 11 }, '1'));
  s.append(svg('text', { x: 4, y: W + 10, 'font-size': 11 }, '0'));
  return el('figure', {}, s, el('figcaption', {}, title));
}

function show(result, source) {
  const out = $('result');
  out.replaceChildren();
  out.append(el('p', { id: 'verdict', class: result.verdict }, result.message));
  const open = result.checks.filter((c) => c.status === 'not-checked').length;
  if (open) {
    const done = result.checks.length - open;
    out.append(el('p', { class: 'open' }, `This page performed ${done} of these ${result.checks.length} checks; the other ${open} are ${NOT_HERE} for a complete verification.`));
  }
  const table = el('table', { id: 'checks' }, el('tr', {}, el('th', {}, 'status'), el('th', {}, 'check'), el('th', {}, 'title'), el('th', {}, 'detail')));
  for (const c of result.checks) {
    const row = el('tr', { class: c.status, 'data-id': c.id, 'data-status': c.status },
      el('td', {}, c.status === 'not-checked' ? 'NOT HERE' : c.status.toUpperCase()), el('td', {}, c.id), el('td', {}, c.title), el('td', {}, c.detail));
    table.append(row);
  }
  out.append(table);
  if (result.notes.length) {
    out.append(el('h3', {}, 'Unsigned notes (nothing signed says this; never part of the verdict)'));
    out.append(el('ul', {}, ...result.notes.map((n) => el('li', {}, n))));
  }
  if (result.verdict === 'failed') return;
  const m = result.figures.metrics || {};
  if (m['audit.raw'] && m['audit.calibrated']) {
    out.append(el('h2', {}, 'Reliability of the audit pool, drawn from the verified logits'));
    out.append(el('div', { class: 'figures' }, reliability('audit, raw (T = 1)', m['audit.raw'].bins), reliability('audit, calibrated', m['audit.calibrated'].bins)));
  }
  const report = source.files.get('data/report.md');
  if (report) out.append(el('h2', {}, 'Report (data/report.md, shown as text)'), el('pre', { id: 'report' }, new TextDecoder().decode(report)));
  for (const [path, title] of [['data/protocol.json', 'Protocol'], ['data/environment.json', 'Environment']]) {
    if (result.documents[path]) out.append(el('h2', {}, title), el('pre', {}, JSON.stringify(result.documents[path], null, 2)));
  }
}

async function run(files, kind) {
  const status = $('status');
  status.textContent = 'verifying…';
  $('result').replaceChildren();
  const started = performance.now();
  try {
    const trust = await readTrust();
    let input;
    if (kind === 'archive') {
      try {
        const read = await readArchive(files[0]);
        input = { kind, bag: { files: read.files, dirs: read.dirs }, detail: read.detail };
      } catch (e) {
        if (!(e instanceof Refused)) throw e;
        input = { kind, failure: e.message };
      }
    } else {
      try {
        input = { kind, bag: await readFolder(files) };
      } catch (e) {
        if (!(e instanceof Refused)) throw e;
        input = { kind, failure: e.message };
      }
    }
    const readSeconds = (performance.now() - started) / 1000;
    const result = await verify(input, trust);
    const seconds = (performance.now() - started) / 1000;
    const name = kind === 'folder' ? String(files[0].webkitRelativePath || '').split('/')[0] : files[0].name;
    status.textContent = `${name || 'bundle'}: ${result.checks.length} checks in ${seconds.toFixed(2)} s`;
    show(result, { kind, files: (input.bag || { files: new Map() }).files });
    window.verification = { verdict: result.verdict, message: result.message, checks: result.checks, figures: result.figures, seconds, readSeconds };
  } catch (e) {
    const message = e instanceof Unreadable || e instanceof Error ? e.message : String(e);
    status.textContent = '';
    $('result').replaceChildren(el('p', { id: 'error' }, message));
    window.verification = { error: message };
  }
}

$('archive').addEventListener('change', (e) => e.target.files.length && run(e.target.files, 'archive'));
$('folder').addEventListener('change', (e) => e.target.files.length && run(e.target.files, 'folder'));
const drop = $('drop');
drop.addEventListener('dragover', (e) => e.preventDefault());
/** The files under a dropped folder, each with the relative path a folder input would give, at most
 * LIMITS.members of them (the walk stops there; readFolder then refuses the folder). */
async function droppedFolder(entry) {
  const out = [];
  const walk = async (dir, prefix) => {
    const reader = dir.createReader();
    for (;;) {
      const batch = await new Promise((resolve, reject) => { reader.readEntries(resolve, reject); });
      if (!batch.length) return;
      for (const child of batch) {
        if (out.length > LIMITS.members) return;
        const rel = `${prefix}/${child.name}`;
        if (child.isDirectory) await walk(child, rel);
        else {
          const file = await new Promise((resolve, reject) => { child.file(resolve, reject); });
          Object.defineProperty(file, 'webkitRelativePath', { value: rel });
          out.push(file);
        }
      }
    }
  };
  await walk(entry, entry.name);
  return out;
}

drop.addEventListener('drop', async (e) => {
  e.preventDefault();
  const item = e.dataTransfer.items && e.dataTransfer.items[0];
  const entry = item && item.webkitGetAsEntry ? item.webkitGetAsEntry() : null;
  if (entry && entry.isDirectory) {
    run(await droppedFolder(entry), 'folder');
    return;
  }
  const { files } = e.dataTransfer;
  if (files.length === 1) run(files, 'archive');
  else $('status').textContent = 'drop one bundle .tar.gz or one bag folder here.';
});
