// The page's Web Worker (built by build.mjs into a string the page starts from a blob: URL): the
// int64 stream's SHA-256 (int64hash.js) off the main thread, so that indices_sha256 is hashed while
// the main thread draws and scores the next rows. Messages, in order: {row: Uint32Array or
// Float64Array} hashed and sent back ({row}, to be reused); {end: true} answered by {hex, kind}.
// Anything that goes wrong is answered by {error}. The page's CSP holds here too: no request.

import { int64Sha256 } from './int64hash.js';

const hasher = int64Sha256();
let queue = hasher.then((h) => postMessage({ ready: h.kind }));

self.onmessage = (event) => {
  const message = event.data;
  queue = queue.then(async () => {
    const h = await hasher;
    if (message.end) postMessage({ hex: h.hex(), kind: h.kind });
    else {
      h.update(message.row);
      postMessage({ row: message.row }, [message.row.buffer]);
    }
  }).catch((e) => postMessage({ error: String(e && e.message) }));
};
