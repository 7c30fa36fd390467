// Digests through WebCrypto, as lowercase hex.

/** Lowercase hex of bytes. */
export function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Lowercase hex digest of `bytes` under a WebCrypto algorithm name (SHA-1, SHA-256, SHA-384, SHA-512). */
export async function sha(algorithm, bytes) {
  return hex(await crypto.subtle.digest(algorithm, bytes));
}

export const sha256 = (bytes) => sha('SHA-256', bytes);
