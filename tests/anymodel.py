"""Generated fixtures for any classifier and dataset: tiny BERT and RoBERTa sequence classifiers
(random weights from a seed, a word-level tokenizer.json, id2label in an order of our choosing),
datasets of K classes with one text or a pair per row in Parquet, JSON lines or CSV, and protocols
that read them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from tests.factory import REPO, WORDS, sha256

SPECIALS = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]"], "roberta": ["<s>", "<pad>", "</s>", "<unk>"]}


def label_names(k: int) -> list[str]:
    return ["negative", "positive"] if k == 2 else ["entailment", "neutral", "contradiction"] if k == 3 \
        else [f"topic{i:02d}" for i in range(k)]


def _tokenizer(out: Path, arch: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials = SPECIALS[arch]
    vocab = {w: i for i, w in enumerate([*specials, ".", ",", *WORDS])}
    pad, unk, cls, sep = (specials[0], specials[1], specials[2], specials[3]) if arch == "bert" \
        else (specials[1], specials[3], specials[0], specials[2])
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    tok.post_processor = processors.TemplateProcessing(  # type: ignore[assignment]
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {sep} $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "pad_token": pad,
        "unk_token": unk, "cls_token": cls, "sep_token": sep}))


def make_hf_model(out: Path, arch: str, model_labels: list[str], seed: int = 0) -> Path:
    """A randomly initialised 2-layer `arch` ("bert" or "roberta") sequence classifier whose
    config.id2label is `model_labels`, saved with save_pretrained (safetensors) and a tokenizer."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        RobertaConfig,
        RobertaForSequenceClassification,
    )

    out.mkdir(parents=True, exist_ok=True)
    _tokenizer(out, arch)
    common: dict[str, Any] = {
        "vocab_size": len(SPECIALS[arch]) + 2 + len(WORDS), "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 64, "num_labels": len(model_labels),
        "id2label": dict(enumerate(model_labels)), "label2id": {n: i for i, n in enumerate(model_labels)}}
    torch.manual_seed(seed)
    if arch == "bert":
        model: Any = BertForSequenceClassification(BertConfig(max_position_embeddings=512, pad_token_id=0, **common))
        head = model.classifier
    else:
        model = RobertaForSequenceClassification(RobertaConfig(
            max_position_embeddings=514, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1, **common))
        head = model.classifier.out_proj
    with torch.no_grad():  # confident, so that calibration has something to fix
        head.weight.mul_(40.0)
    model.save_pretrained(out, safe_serialization=True)
    return out


def _sentence(rng: random.Random, lo: int = 3, hi: int = 14) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) + " ."


def make_rows(path: Path, fmt: str, rows: int, k: int, paired: bool, id_column: str | None = "id",
              text: str = "text", pair: str = "hypothesis", label: str = "label", seed: int = 0) -> Path:
    """`rows` rows of random sentences (or sentence pairs) with labels 0..k-1, written as `fmt`."""
    rng = random.Random(seed)
    cols: dict[str, Any] = {}
    if id_column is not None:
        cols[id_column] = list(range(1000, 1000 + rows))
    cols[text] = [_sentence(rng) for _ in range(rows)]
    if paired:
        cols[pair] = [_sentence(rng) for _ in range(rows)]
    cols[label] = [rng.randrange(k) for _ in range(rows)]
    cols[text][0] = " ".join(rng.choice(WORDS) for _ in range(600))  # one row over max_length
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        keys = list(cols)
        path.write_text("".join(json.dumps({c: cols[c][i] for c in keys}) + "\n" for i in range(rows)))
    else:
        table = pa.table({c: pa.array(v, pa.int64() if c in (id_column, label) else pa.string())
                          for c, v in cols.items()})
        if fmt == "csv":
            pcsv.write_csv(table, path)
        else:
            pq.write_table(table, path)
    return path


def column_types(path: Path, fmt: str) -> dict[str, str]:
    from job.dataset import read_table

    return {f.name: str(f.type) for f in read_table(path, fmt).schema}


def make_any_world(root: Path, *, arch: str, k: int, fmt: str, paired: bool, sizes: tuple[int, int, int],
                   id_column: str | None = "id", seed: int = 0) -> tuple[Path, Path]:
    """A model whose outputs are the dataset's labels reversed and upper-cased, a dataset, a protocol
    with the dataset fields and a by-name label map, and a resource lock; returns (protocol, lock)."""
    from job.labelmap import match_labels

    names = label_names(k)
    model_labels = [n.upper() for n in reversed(names)]
    model = make_hf_model(root / "model", arch, model_labels, seed)
    ext = {"parquet": "parquet", "jsonl": "jsonl", "csv": "csv"}[fmt]
    data = make_rows(root / f"data/validation.{ext}", fmt, sum(sizes), k, paired, id_column, seed=seed)
    doc = json.loads((REPO / "provenance.json").read_text())
    for pool, size in zip(doc["split"]["pools"], sizes, strict=True):
        pool["size"] = size
    doc["inference"]["torch_threads"] = 1
    doc["stability"]["sizes"] = [5, 10, sizes[1]]
    ds = doc["resources"]["dataset"]
    ds.update(rows=sum(sizes), labels=names, columns=column_types(data, fmt), format=fmt, id_column=id_column,
              text_column="text", label_column="label")
    if paired:
        ds["text_pair_column"] = "hypothesis"
    doc["label_map"] = match_labels(model_labels, names)
    protocol = root / "protocol.json"
    protocol.write_text(json.dumps(doc, indent=2))

    def entry(repo_path: str, local: Path) -> dict[str, Any]:
        return {"path": repo_path, "size": local.stat().st_size, "sha256": sha256(local), "local_path": str(local)}

    lock = {"model": {"repo_id": f"test/tiny-{arch}", "repo_type": "model", "revision": "local",
                      "files": [entry(p.name, p) for p in sorted(model.iterdir())]},
            "dataset": {"repo_id": "test/tiny-data", "repo_type": "dataset", "revision": "local",
                        "files": [entry(f"data/validation.{ext}", data)], "rows": sum(sizes),
                        "columns": ds["columns"], "labels": names}}
    (root / "lock.json").write_text(json.dumps(lock, indent=2))
    return protocol, root / "lock.json"
