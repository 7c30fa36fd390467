// The pre-registered label map (FORMAT.md, protocol `label_map`): the model's output indices
// 0..K-1 map one to one onto the dataset's K labels, by name ignoring case (Python's casefold) when
// it says so, and each pool's predictions hold one logit column per dataset label. The detail warns
// when an explicit map sends a model label to another dataset label than its namesake.

import { Failed } from './bag.js';
import { casefold } from './casefold.js';

/** Python's repr of a str (the quotes it picks; escapes of backslash and the quote only). */
export function pyRepr(s) {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  return q + s.replace(/\\/g, '\\\\').replace(new RegExp(q, 'g'), `\\${q}`) + q;
}

const list = (items) => `[${items.map((x) => (typeof x === 'string' ? pyRepr(x) : String(x))).join(', ')}]`;

/** Multisets of strings equal (the same strings, as often). */
function sameStrings(a, b) {
  if (a.length !== b.length) return false;
  const x = [...a].sort();
  const y = [...b].sort();
  return x.every((v, i) => v === y[i]);
}

/** The check on the protocol and `columns` (pool -> its logit columns); a sentence or Failed. */
export function checkLabelMap(protocol, columns) {
  const labels = protocol.resources.dataset.labels;
  const section = protocol.label_map;
  const pairs = [...section.pairs].sort((a, b) => a.model_index - b.model_index);
  const indices = pairs.map((p) => p.model_index);
  if (indices.length !== labels.length || indices.some((v, i) => v !== i)) {
    throw new Failed(`label_map lists model indices ${list(indices)}, the dataset has ${labels.length} labels (0..${labels.length - 1} each once).`);
  }
  const targets = pairs.map((p) => p.dataset_label);
  if (!sameStrings(targets, labels)) throw new Failed(`label_map maps onto ${list(targets)}, not each of the dataset's labels ${list(labels)} once.`);
  if (section.by === 'name') {
    const off = pairs.find((p) => casefold(p.model_label) !== casefold(p.dataset_label));
    if (off) throw new Failed(`label_map says it matches by name, but pairs model label ${pyRepr(off.model_label)} with dataset label ${pyRepr(off.dataset_label)}.`);
  }
  for (const [pool, k] of Object.entries(columns)) {
    if (k !== labels.length) throw new Failed(`data/predictions/${pool}.parquet has ${k} logit columns, the label map ${labels.length}.`);
  }
  const shown = pairs.map((p) => `${p.model_index}:${p.model_label}->${p.dataset_label}`).join(', ');
  return `bijection by ${section.by} onto ${labels.length} dataset labels (${[...shown].slice(0, 200).join('')})${againstNames(pairs)}`;
}

/** The warning when a pair sends a model label to another dataset label than its namesake. */
function againstNames(pairs) {
  const byFold = new Map(pairs.map((p) => [casefold(p.dataset_label), p.dataset_label]));
  for (const p of pairs) {
    const namesake = byFold.get(casefold(p.model_label));
    if (namesake !== undefined && namesake !== p.dataset_label) {
      return `; WARNING: it pairs model label ${pyRepr(p.model_label)} with ${pyRepr(p.dataset_label)}, though the dataset has ${pyRepr(namesake)}`;
    }
  }
  return '';
}
