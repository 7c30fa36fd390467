// SHA-256 of a stream of non-negative integers, each as 8 little-endian bytes (int64): the
// bootstrap's indices_sha256 over its resample matrix (792 MB on a 50,000-row bundle), fed a row
// at a time in bounded memory. WebCrypto hashes one buffer only, so the stream goes through
// hash-wasm's SHA-256 (WebAssembly, about twice the page's own JavaScript SHA-256; the page's CSP
// allows 'wasm-unsafe-eval' for it and nothing that reaches the network). Where WebAssembly cannot
// be instantiated, the JavaScript one (digest.js Int64Sha256) hashes the same bytes.

import { createSHA256 } from 'hash-wasm';
import { Int64Sha256 } from './digest.js';

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** The stream hashed by WebAssembly: each row's values written as int64 words into one reused
 * buffer (the high words stay 0 for a Uint32Array row), the buffer's bytes fed to the hasher. */
class WasmInt64Sha256 {
  constructor(hasher) {
    this.hasher = hasher;
    this.words = new Uint32Array(0);
  }

  /** Feed every value of `row` (a Uint32Array, or a Float64Array of integers below 2**53). */
  update(row) {
    const len = row.length;
    if (this.words.length < 2 * len) this.words = new Uint32Array(2 * len);
    const words = this.words;
    if (row instanceof Uint32Array) {
      for (let i = 0; i < len; i++) {
        words[2 * i] = row[i];
        words[2 * i + 1] = 0;
      }
    } else {
      for (let i = 0; i < len; i++) {
        const v = row[i];
        words[2 * i] = v % 0x100000000;
        words[2 * i + 1] = Math.floor(v / 0x100000000);
      }
    }
    this.hasher.update(new Uint8Array(words.buffer, 0, 8 * len));
  }

  /** The lowercase hex digest of everything fed (the hasher is spent). */
  hex() {
    return this.hasher.digest('hex');
  }
}

/** A fresh int64 stream hasher ({update(row), hex(), kind}): WebAssembly ('wasm') where the page
 * may instantiate it, else (or with webAssembly false) the page's JavaScript SHA-256 ('js'); both
 * give the same digest. */
export async function int64Sha256({ webAssembly = true } = {}) {
  if (webAssembly && LITTLE_ENDIAN && typeof WebAssembly === 'object') {
    try {
      const hasher = await createSHA256();
      hasher.init();
      return Object.assign(new WasmInt64Sha256(hasher), { kind: 'wasm' });
    } catch {
      // WebAssembly refused (a CSP without 'wasm-unsafe-eval', a locked-down browser): JavaScript
    }
  }
  return Object.assign(new Int64Sha256(), { kind: 'js' });
}
