// A sharded run's record (environment.json `cluster`, FORMAT.md): every batch of both pools' predictions
// ran on exactly one worker, no worker lists a batch or a pool the bundle does not have, and the
// audit batches carried the sha256 of the bag's temperature.json. The workers, machines and CPU
// kinds are the signer's word: these checks hold the record to its own consistency only.

import { Failed } from './bag.js';
import { pyRepr } from './labelmap.js';

/** The check of `cluster` against `batches` (pool -> the set of batch numbers its predictions hold). */
export function checkBatchOwners(cluster, batches) {
  for (const [pool, have] of Object.entries(batches)) {
    const owners = new Map();
    for (const w of cluster.workers) {
      for (const b of w.batches[pool] || []) {
        if (!owners.has(b)) owners.set(b, []);
        owners.get(b).push(w.id);
      }
    }
    const byNumber = (a, b) => a - b;
    const twice = [...owners.keys()].filter((b) => owners.get(b).length > 1).sort(byNumber);
    if (twice.length) {
      const ws = owners.get(twice[0]);
      throw new Failed(`environment.json lists ${pool} batch ${twice[0]} under ${ws.length} workers (${ws.join(', ')}); each batch must have exactly one.`);
    }
    const missing = [...have].filter((b) => !owners.has(b)).sort(byNumber);
    if (missing.length) throw new Failed(`${pool} batch ${missing[0]} is under no worker in environment.json (${missing.length} batches are); each batch must have exactly one.`);
    const extra = [...owners.keys()].filter((b) => !have.has(b)).sort(byNumber);
    if (extra.length) throw new Failed(`environment.json lists ${pool} batch ${extra[0]} under ${owners.get(extra[0])[0]}, but the ${pool} predictions have no such batch.`);
  }
  const unknown = [...new Set(cluster.workers.flatMap((w) => Object.keys(w.batches)))].filter((p) => !(p in batches)).sort();
  if (unknown.length) throw new Failed(`environment.json lists batches of pool ${pyRepr(unknown[0])}, which the bundle does not have.`);
  const ran = cluster.workers.filter((w) => Object.values(w.batches).some((list) => list.length));
  const kinds = new Set(ran.map((w) => w.cpu_kind));
  const total = Object.values(batches).reduce((s, b) => s + b.size, 0);
  return `${total} batches, each on exactly one of ${ran.length} workers on ${new Set(ran.map((w) => w.node_id)).size} `
    + `machines, ${kinds.size} CPU kind(s)${kinds.size > 1 ? ', MIXED' : ''}, as the signer records them (a claim: nothing checks which machine ran a batch)`;
}

/** The audit batches carried `temperatureSha` (the bag's temperature.json's sha256). */
export function checkAuditTemperature(cluster, temperatureSha) {
  if (cluster.audit_temperature_sha256 !== temperatureSha) {
    throw new Failed(`environment.json says the audit batches carried temperature sha256 ${cluster.audit_temperature_sha256}, but temperature.json's is ${temperatureSha}.`);
  }
  return "audit batches carried the frozen temperature.json's sha256";
}
