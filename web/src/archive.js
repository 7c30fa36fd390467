// A strict reader of the one archive dialect `python -m job archive` writes (bundle/FORMAT.md,
// "Archive"): one gzip member of POSIX ustar headers for regular files and folders only, fixed modes
// and owners, then two zero blocks and zero padding. Written again from the format, in the page's
// own code: what it cannot read safely it refuses, at the header that shows it, before reading what
// the header announces. Sizes and counts are checked against the format's limits as each header
// arrives; the archive is inflated by the browser's DecompressionStream in chunks.

export const LIMITS = Object.freeze({
  members: 10_000,
  fileBytes: 64 * 1024 * 1024,
  totalBytes: 256 * 1024 * 1024,
  archiveBytes: 256 * 1024 * 1024 + 32 * 1024 * 1024,
  nameBytes: 255,
  pathBytes: 1024,
  trailingZeroBytes: 1024 * 1024,
});

const FOREIGN = '; an archive from another tool must be extracted with tar and the folder verified instead';

/** The archive is outside the dialect or unsafe: archive.safe fails with this sentence. */
export class Refused extends Error {}
/** The archive is not gzip or is truncated or corrupt: nothing can be checked. */
export class Unreadable extends Error {}

const KINDS = {
  '1': 'a hard link', '2': 'a symbolic link', '3': 'a character device', '4': 'a block device',
  '6': 'a FIFO', '7': 'a contiguous file (type 7)', x: 'a pax extended header', g: 'a pax global header',
  L: 'a GNU long-name header', K: 'a GNU long-link header', S: 'a GNU sparse file', '\0': 'an old-style regular file (type NUL)',
};

const latin = (bytes) => Array.from(bytes, (b) => String.fromCharCode(b)).join('');
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
const lossy = new TextDecoder('utf-8');
const isZero = (bytes) => bytes.every((b) => b === 0);

function trimEnd(field) {
  let end = field.length;
  while (end > 0 && (field[end - 1] === 0 || field[end - 1] === 0x20)) end--;
  return field.subarray(0, end);
}

function octal(field, what, name) {
  const digits = trimEnd(field);
  if (!digits.length || digits.some((c) => c < 0x30 || c > 0x37)) {
    throw new Refused(`archive member '${name}' has a ${what} field that is not plain octal (base-256 or text)${FOREIGN}.`);
  }
  let n = 0;
  for (const c of digits) n = n * 8 + (c - 0x30);
  return n;
}

function text(field, what, name) {
  const nul = field.indexOf(0);
  if (nul < 0) return field;
  if (!isZero(field.subarray(nul))) throw new Refused(`archive member '${name}' has bytes after the NUL that ends its ${what}${FOREIGN}.`);
  return field.subarray(0, nul);
}

/** The member one non-zero 512-byte header describes: {name, isDir, size}. */
export function parseHeader(block) {
  const rawName = block.subarray(0, 100);
  const shown = lossy.decode(rawName.subarray(0, rawName.indexOf(0) < 0 ? 100 : rawName.indexOf(0))).slice(0, 80);
  const digits = trimEnd(block.subarray(148, 156));
  let total = 8 * 0x20;
  for (let k = 0; k < 512; k++) if (k < 148 || k >= 156) total += block[k];
  if (!digits.length || digits.some((c) => c < 0x30 || c > 0x37) || octal(block.subarray(148, 156), 'checksum', shown) !== total) {
    throw new Unreadable(`the archive's header at member '${shown}' has a bad checksum, so it is not a tar archive or is corrupt; fetch the archive again.`);
  }
  if (latin(block.subarray(257, 265)) !== 'ustar\u000000') throw new Refused(`archive member '${shown}' is not a POSIX ustar header${FOREIGN}.`);
  const kind = String.fromCharCode(block[156]);
  if (kind !== '0' && kind !== '5') {
    throw new Refused(`archive member '${shown}' is ${KINDS[kind] || `of tar type ${JSON.stringify(kind)}`}; a bundle archive holds only regular files and folders${FOREIGN}.`);
  }
  const isDir = kind === '5';
  const nameB = text(block.subarray(0, 100), 'name', shown);
  const prefix = text(block.subarray(345, 500), 'name prefix', shown);
  if (!nameB.length) throw new Refused(`archive member after '${shown}' has an empty name${FOREIGN}.`);
  const full = prefix.length ? new Uint8Array([...prefix, 0x2f, ...nameB]) : nameB;
  let name;
  try {
    name = strictUtf8.decode(full);
  } catch {
    throw new Refused(`archive member '${shown}' has a name that is not UTF-8${FOREIGN}.`);
  }
  if (isDir !== name.endsWith('/')) {
    throw new Refused(`archive member '${name.slice(0, 80)}' is a ${isDir ? 'folder' : 'regular file'} whose name ${isDir ? 'lacks' : 'ends in'} a '/'${FOREIGN}.`);
  }
  if (isDir) name = name.slice(0, -1);
  const mode = octal(block.subarray(100, 108), 'mode', name);
  if (mode !== (isDir ? 0o755 : 0o644)) throw new Refused(`archive member '${name.slice(0, 80)}' has mode ${mode.toString(8)}, not ${isDir ? '755' : '644'}${FOREIGN}.`);
  const uid = octal(block.subarray(108, 116), 'uid', name);
  const gid = octal(block.subarray(116, 124), 'gid', name);
  if (uid || gid || text(block.subarray(265, 297), 'owner name', name).length || text(block.subarray(297, 329), 'group name', name).length) {
    throw new Refused(`archive member '${name.slice(0, 80)}' has an owner other than uid 0, gid 0 with empty names${FOREIGN}.`);
  }
  if (!isZero(block.subarray(157, 257)) || !isZero(block.subarray(329, 345)) || !isZero(block.subarray(500))) {
    throw new Refused(`archive member '${name.slice(0, 80)}' carries a link name, device numbers or trailing header bytes${FOREIGN}.`);
  }
  const size = octal(block.subarray(124, 136), 'size', name);
  octal(block.subarray(136, 148), 'mtime', name);
  if (isDir && size) throw new Refused(`archive folder '${name.slice(0, 80)}' announces ${size} bytes of data${FOREIGN}.`);
  return { name, isDir, size };
}

function safeName(name) {
  if (!name || name.includes('\0') || name.includes('\\')) throw new Refused(`archive member name '${name}' is empty or holds a NUL or a backslash; the archive was not written by the job.`);
  if (name.startsWith('/')) throw new Refused(`archive member '${name}' has an absolute path; refusing to extract it.`);
  const parts = name.split('/');
  if (parts.includes('..')) throw new Refused(`archive member '${name}' escapes the extraction folder with '..'; refusing to extract it.`);
  if (parts.some((p) => p === '' || p === '.')) throw new Refused(`archive member '${name}' has an empty or '.' path component${FOREIGN}.`);
  if (parts[0].length >= 2 && parts[0][1] === ':') throw new Refused(`archive member '${name}' starts with a drive letter; refusing to extract it.`);
  const enc = parts.map((p) => new TextEncoder().encode(p).length);
  if (enc.some((n) => n > LIMITS.nameBytes) || enc.reduce((a, n) => a + n + 1, 0) > LIMITS.pathBytes) {
    throw new Refused(`archive member '${name.slice(0, 60)}'… has a name over ${LIMITS.nameBytes} bytes or a path over ${LIMITS.pathBytes}; the archive was not written by the job.`);
  }
  return parts;
}

// Two names that land on one file on a case-insensitive or normalising file system (Python's
// str.casefold is approximated by toLowerCase, which covers every name the format writes).
const fold = (path) => path.normalize('NFC').toLowerCase();

class Names {
  constructor() {
    this.seen = new Map();
  }

  add(parts, isDir) {
    const member = parts.join('/');
    for (let k = 1; k < parts.length; k++) this.claim(parts.slice(0, k).join('/'), true, member, false);
    this.claim(member, isDir, member, true);
  }

  claim(path, isDir, member, explicit) {
    const key = fold(path);
    const seen = this.seen.get(key);
    if (!seen) {
      this.seen.set(key, [path, isDir, explicit]);
      return;
    }
    const [exact, wasDir, wasMember] = seen;
    if (exact !== path) throw new Refused(`archive member '${member}' differs from '${exact}' only in case or Unicode form; refusing to extract it.`);
    if (explicit && wasMember) throw new Refused(`archive member '${member}' appears twice; a later copy would silently replace the first, refusing to extract it.`);
    if (!wasDir) throw new Refused(`archive member '${member}' goes through the file '${exact}', which is not a folder; refusing to extract it.`);
    if (!isDir) throw new Refused(`archive member '${member}' is a file where the archive already has a folder; refusing to extract it.`);
    if (explicit) this.seen.set(key, [path, true, true]);
  }
}

/** Inflated bytes in order, in bounded steps, from a ReadableStream of the gzip file. */
class Inflated {
  constructor(stream) {
    this.reader = stream.pipeThrough(new DecompressionStream('gzip')).getReader();
    this.chunks = [];
    this.have = 0;
    this.offset = 0;
    this.done = false;
  }

  async more() {
    let got;
    try {
      got = await this.reader.read();
    } catch (e) {
      // Chromium says "Junk found after end of compressed data" for bytes after the gzip member
      // (a second member or trailing data), which GNU tar would read: a refusal, not corruption.
      if (/junk/i.test(String(e && e.message))) throw new Refused(`the archive holds data after the end of its gzip stream (a second gzip member or trailing bytes)${FOREIGN}.`);
      throw new Unreadable('the archive is not gzip, or its gzip stream is truncated or corrupt; fetch the archive again.');
    }
    if (got.done) {
      this.done = true;
      return false;
    }
    this.chunks.push(got.value);
    this.have += got.value.length;
    return true;
  }

  async read(n) {
    while (this.have < n) {
      if (!(await this.more())) throw new Unreadable(`the archive ends after ${this.offset + this.have} bytes, inside a member or before its end-of-archive blocks (truncated); fetch the archive again.`);
    }
    const out = new Uint8Array(n);
    let at = 0;
    while (at < n) {
      const head = this.chunks[0];
      const take = Math.min(head.length, n - at);
      out.set(head.subarray(0, take), at);
      at += take;
      if (take === head.length) this.chunks.shift();
      else this.chunks[0] = head.subarray(take);
    }
    this.have -= n;
    this.offset += n;
    return out;
  }

  async restIsZero(cap) {
    let seen = 0;
    for (;;) {
      for (const c of this.chunks) {
        if (!isZero(c)) throw new Refused('the archive holds non-zero data after its end-of-archive blocks (a second archive appended?), which `tar -i` would extract; refusing it.');
        seen += c.length;
      }
      this.chunks = [];
      this.have = 0;
      if (seen > cap) throw new Refused(`the archive holds over ${cap.toLocaleString('en-US')} bytes of padding after its end-of-archive blocks; refusing it.`);
      if (!(await this.more())) return seen;
    }
  }
}

/**
 * Read the bundle archive `file` (a Blob): {files: Map(path -> bytes), dirs: Set, detail} of the
 * bag inside it, paths relative to the bag root. Throws Refused (archive.safe fails) or Unreadable.
 */
export async function readArchive(file) {
  if (file.size > LIMITS.archiveBytes) {
    throw new Refused(`${file.name || 'the archive'} is ${file.size.toLocaleString('en-US')} bytes, over the ${LIMITS.archiveBytes.toLocaleString('en-US')}-byte limit for a bundle archive; refusing it.`);
  }
  const src = new Inflated(file.stream());
  const names = new Names();
  const files = new Map();
  const dirs = new Set();
  let total = 0;
  let count = 0;
  for (;;) {
    const block = await src.read(512);
    if (isZero(block)) {
      if (!isZero(await src.read(512))) throw new Refused('the archive has a lone zero block followed by more headers, which `tar -i` would extract; refusing it.');
      const padding = await src.restIsZero(LIMITS.trailingZeroBytes);
      if (padding % 512) throw new Refused('the archive does not end on a 512-byte block; refusing it.');
      break;
    }
    count += 1;
    if (count > LIMITS.members) throw new Refused(`archive holds more than ${LIMITS.members} members; a bundle holds about 25, refusing to extract it.`);
    const header = parseHeader(block);
    const parts = safeName(header.name);
    names.add(parts, header.isDir);
    if (header.isDir) {
      dirs.add(header.name);
      continue;
    }
    if (header.size > LIMITS.fileBytes) throw new Refused(`archive member '${header.name}' is ${header.size} bytes, over the ${LIMITS.fileBytes}-byte limit for one file.`);
    total += header.size;
    if (total > LIMITS.totalBytes) throw new Refused(`archive expands to more than ${LIMITS.totalBytes} bytes; refusing to extract it.`);
    for (let k = 1; k < parts.length; k++) dirs.add(parts.slice(0, k).join('/'));
    files.set(header.name, await src.read(header.size));
    const pad = (512 - (header.size % 512)) % 512;
    if (pad && !isZero(await src.read(pad))) throw new Refused(`archive member '${header.name}' is followed by non-zero padding${FOREIGN}.`);
  }
  const detail = `${count} members extracted, ${total} bytes, no links, no absolute or '..' paths`;
  return { ...bagRoot(files, dirs), detail };
}

/** The bag inside: the archive's root itself when it holds bagit.txt, else its one top folder. */
function bagRoot(files, dirs) {
  if (files.has('bagit.txt')) return { files, dirs };
  const top = new Set([...files.keys(), ...dirs].map((p) => p.split('/')[0]));
  const [only] = top;
  if (top.size === 1 && dirs.has(only)) {
    const inside = new Map();
    for (const [p, b] of files) inside.set(p.slice(only.length + 1), b);
    const sub = new Set([...dirs].filter((d) => d.startsWith(`${only}/`)).map((d) => d.slice(only.length + 1)));
    return { files: inside, dirs: sub };
  }
  throw new Refused(`archive holds ${JSON.stringify([...top].sort().slice(0, 5))} at its top level, not one bag folder with bagit.txt; pass the archive the job wrote.`);
}
