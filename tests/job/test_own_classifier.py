"""Your own classifier, offline, from scratch: a tiny BERT whose id2label is ENTAILMENT, NEUTRAL,
CONTRADICTION and a premise/hypothesis Parquet split whose ClassLabel (in the file's Hugging Face
schema metadata) is contradiction, entailment, neutral. `job lock` -> `init --resources` -> `smoke`
-> `run` -> verify; and each way the first hour used to go wrong: a lock with the classes in
another order, a pasted positional label map, a run far below chance, bad rows, one class, no
network, and two routes that wrote different protocols for the same inputs."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from job.cli import main
from tests.anymodel import make_hf_model
from tests.factory import WORDS, edited_json
from tests.hub_env import go_online

MODEL_LABELS = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
CLASSES = ["contradiction", "entailment", "neutral"]  # the dataset's ClassLabel, class 0 first
MODEL_SHA, DATA_SHA = "a" * 40, "b" * 40
DATA_PATH = "data/validation-00000-of-00001.parquet"
POOLS = "explore:6,calibration:40,audit:rest"
ROWS = 96


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + " ."


def hf_metadata(classes: list[str], column: str = "label") -> bytes:
    """The `huggingface` schema metadata `datasets` writes into Parquet: the label's ClassLabel."""
    return json.dumps({"info": {"features": {
        "idx": {"dtype": "int32", "_type": "Value"}, "premise": {"dtype": "string", "_type": "Value"},
        "hypothesis": {"dtype": "string", "_type": "Value"},
        column: {"names": classes, "_type": "ClassLabel"}}}}).encode()


def model_truth(model_dir: Path, premises: list[str], hypotheses: list[str]) -> list[int]:
    """Each row's class as the model predicts it, named by the model and mapped onto CLASSES by name,
    so that the by-name map is right on these rows and a positional one is wrong on every one."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    # Rows of about one length share a batch: padding every row to the 512-token premise cost 20x.
    lengths = [len(ids) for ids in tok(premises, hypotheses, truncation=True, max_length=512)["input_ids"]]
    order = sorted(range(len(premises)), key=lambda i: lengths[i])
    pred = [0] * len(premises)
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            batch = order[start:start + 64]
            enc = tok([premises[i] for i in batch], [hypotheses[i] for i in batch], truncation=True,
                      max_length=512, padding=True, return_tensors="pt")
            for i, p in zip(batch, model(**enc).logits.argmax(dim=1).tolist(), strict=True):
                pred[i] = p
    return [CLASSES.index(MODEL_LABELS[i].lower()) for i in pred]


def write_split(path: Path, model_dir: Path, *, rows: int = ROWS, classes: list[str] | None = None,
                edit: Any = None, metadata: bool = True) -> Path:
    """A premise/hypothesis split whose labels are the model's by-name prediction on 7 rows of 8 (the
    8th shifted to another class), one premise over 512 tokens; `edit(cols)` changes columns first."""
    rng = random.Random(7)
    premises = [_sentence(rng, rng.randint(3, 12)) for _ in range(rows)]
    premises[0] = _sentence(rng, 700)
    hypotheses = [_sentence(rng, rng.randint(3, 12)) for _ in range(rows)]
    truth = model_truth(model_dir, premises, hypotheses)
    labels = [t if i % 8 else (t + 1) % 3 for i, t in enumerate(truth)]
    cols: dict[str, Any] = {"idx": list(range(5000, 5000 + rows)), "premise": premises, "hypothesis": hypotheses,
                            "label": labels}
    if edit is not None:
        edit(cols)
    table = pa.table({"idx": pa.array(cols["idx"], pa.int32()), "premise": pa.array(cols["premise"], pa.string()),
                      "hypothesis": pa.array(cols["hypothesis"], pa.string()),
                      "label": pa.array(cols["label"], pa.int64())})
    if metadata:
        table = table.replace_schema_metadata({b"huggingface": hf_metadata(classes or CLASSES)})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root/model (the classifier) and root/dataset/data/validation-...parquet (the split)."""
    root = tmp_path_factory.mktemp("own")
    model = make_hf_model(root / "model", "bert", MODEL_LABELS, seed=3)
    (model / "README.md").write_text("# tiny-nli\n")  # locked with the rest, never read by the run
    write_split(root / "dataset" / DATA_PATH, model)
    return root


def lock_args(root: Path, out: Path, *extra: str, data: Path | None = None) -> list[str]:
    return ["lock", "--model-dir", str(root / "model"), "--data", str(data or root / "dataset" / DATA_PATH),
            "--data-root", str((data or root / "dataset" / DATA_PATH).parent.parent), "--text", "premise",
            "--text-pair", "hypothesis", "--label", "label", "--out", str(out), *extra]


def init_args(out: Path, *extra: str) -> list[str]:
    return ["init", "--model", "me/tiny-nli", "--model-revision", MODEL_SHA, "--dataset", "me/pairs",
            "--dataset-revision", DATA_SHA, "--split", "validation", "--text", "premise",
            "--text-pair", "hypothesis", "--label", "label", "--id", "idx", "--name", "tiny-nli",
            "--pools", POOLS, "--out", str(out), *extra]


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def chain(world: Path, tmp_path_factory: pytest.TempPathFactory, signing_key_dir: Path) -> dict[str, Path]:
    """lock, protocol and bundle of the local route, run once for the module."""
    out = tmp_path_factory.mktemp("chain")
    assert main(lock_args(world, out / "lock.json")) == 0
    assert main(init_args(out / "protocol.json", "--resources", str(out / "lock.json"))) == 0
    assert main(["run", "--protocol", str(out / "protocol.json"), "--resources", str(out / "lock.json"),
                 "--out", str(out / "run"), "--signing-key", str(signing_key_dir / "signing-key.pem"),
                 "--no-progress"]) == 0
    return {"lock": out / "lock.json", "protocol": out / "protocol.json", "run": out / "run", "dir": out}


def test_lock_hashes_every_file_and_reads_the_classes_from_the_parquet_metadata(world: Path, chain):
    lock = json.loads(chain["lock"].read_text())
    model_files = sorted(p.name for p in (world / "model").iterdir())
    assert [f["path"] for f in lock["model"]["files"]] == model_files
    for f in lock["model"]["files"] + lock["dataset"]["files"]:
        local = (chain["lock"].parent / f["local_path"]).resolve()
        assert f["sha256"] == hashlib.sha256(local.read_bytes()).hexdigest() and f["size"] == local.stat().st_size
    ds = lock["dataset"]
    assert [f["path"] for f in ds["files"]] == [DATA_PATH]
    assert ds["labels"] == CLASSES and ds["rows"] == ROWS
    assert ds["columns"] == {"idx": "int32", "premise": "string", "hypothesis": "string", "label": "int64"}
    assert "repo_id" not in lock["model"] and "revision" not in lock["dataset"]  # only what the user states
    protocol = json.loads(chain["protocol"].read_text())
    assert "README.md" not in [f["path"] for f in protocol["resources"]["model"]["files"]]
    used = json.loads((chain["run"] / "data" / "resources.json").read_text())
    assert used["profile"] == "formal" and "README.md" not in [f["path"] for f in used["model"]["files"]]


@pytest.mark.parametrize("beside", ["dataset_info.json", "README.md", "--labels", "nothing"])
def test_lock_reads_the_classes_stated_beside_the_files_or_asks_for_them(world, tmp_path, capsys, beside):
    data = write_split(tmp_path / "ds" / DATA_PATH, world / "model", metadata=False)
    extra: list[str] = []
    if beside == "dataset_info.json":
        (tmp_path / "ds" / "dataset_info.json").write_text(json.dumps(
            {"default": {"features": {"label": {"_type": "ClassLabel", "names": CLASSES}}}}))
    elif beside == "README.md":
        (tmp_path / "ds" / "README.md").write_text(card())
    elif beside == "--labels":
        extra = ["--labels", ",".join(CLASSES)]
    rc = main(lock_args(world, tmp_path / "lock.json", *extra, data=data))
    if beside == "nothing":
        assert rc == 2
        err = error_line(capsys)
        assert "states no class names for 'label'" in err and "--labels NAME,NAME" in err
        assert not (tmp_path / "lock.json").exists()
        return
    assert rc == 0
    assert json.loads((tmp_path / "lock.json").read_text())["dataset"]["labels"] == CLASSES


def test_the_verifier_refuses_a_local_revision_claimed_as_checked_by_a_hub(chain, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from bundle import layout
    from tests.verify.tamper import copy_bag, edit_json, reseal, update_stage_hashes
    from verify.api import verify_path
    from verify.context import Trust

    bag = copy_bag(chain["run"], tmp_path / "bag")
    edit_json(bag, layout.RESOURCES_JSON, lambda d: d["model"].update(revision_checked_by_hub=True))
    update_stage_hashes(bag)
    reseal(bag, Ed25519PrivateKey.generate())
    checks = {c.id: c for c in verify_path(bag, Trust()).checks}
    assert checks["resources.pins"].status == "fail" and "checked by a hub" in checks["resources.pins"].detail


def test_the_local_route_runs_smoke_and_verifies(chain, capsys):
    from verify.api import verify_path
    from verify.context import Trust
    from verify.verdict_output import table

    doc = json.loads(chain["protocol"].read_text())
    assert [p["dataset_label"] for p in doc["label_map"]["pairs"]] == ["entailment", "neutral", "contradiction"]
    assert doc["label_map"]["by"] == "name"
    capsys.readouterr()
    assert main(["smoke", "--protocol", str(chain["protocol"]), "--resources", str(chain["lock"])]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("smoke ok:") and "against chance 33.3%" in last
    result = verify_path(chain["run"], Trust())
    failed = [(c.id, c.detail) for c in result.checks if c.status != "pass" and c.id != "signature.signer-trusted"]
    assert failed == []
    ids = {c.id: c for c in result.checks}
    assert {"labels.map", "metrics.warnings", "metrics.truncation"} <= set(ids)
    assert ids["metrics.warnings"].detail.startswith("none called for: audit accuracy")
    assert "The run warns" not in table(result)


def test_a_revision_from_a_lock_is_marked_as_stated_by_the_protocols_author(chain):
    resources = json.loads((chain["run"] / "data" / "resources.json").read_text())
    for kind in ("model", "dataset"):
        assert resources[kind]["source"] == "local" and resources[kind]["revision_checked_by_hub"] is False
    assert resources["model"]["revision"] == MODEL_SHA  # the protocol's, as its author states it
    report = (chain["run"] / "data" / "report.md").read_text()
    assert "revision stated by the protocol's author" in report and "source local" in report
    crate = (chain["run"] / "data" / "ro-crate-metadata.json").read_text()
    assert crate.count("revision stated by the protocol's author") == 2


def test_truncation_is_counted_per_pool_in_metrics_and_report(chain):
    metrics = json.loads((chain["run"] / "data" / "metrics.json").read_text())
    t = metrics["truncation"]
    assert sum(t[p]["truncated"] for p in ("audit", "calibration")) <= 1
    cut = [p for p in ("audit", "calibration", "explore") if p in t and t[p]["truncated"]]
    pools = json.loads((chain["run"] / "data" / "pools.json").read_text())["pools"]
    long_pool = next(name for name, rows in pools.items() if any(r["idx"] == 5000 for r in rows))
    assert cut == ([long_pool] if long_pool != "explore" else [])
    for pool in ("audit", "calibration"):
        table = pq.read_table(chain["run"] / "data" / "predictions" / f"{pool}.parquet")
        assert t[pool]["longest_tokens"] == max(table.column("full_token_count").to_pylist())
        assert t[pool]["rows"] == table.num_rows and t[pool]["max_length"] == 512
    if cut:
        assert t[cut[0]]["longest_tokens"] > 700  # 700 premise words, each a token, before the cut
    report = (chain["run"] / "data" / "report.md").read_text()
    assert "### Truncation" in report and f"audit {t['audit']['truncated']} of {t['audit']['rows']}" in report


def _legend_touches_bars(metrics: dict[str, Any], legend_above: bool, extras: Any = None) -> bool:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import Rectangle

    from bundle.views.figures import _fresh_rc, reliability_figure

    with _fresh_rc():
        fig = reliability_figure(metrics["pools"]["audit"], metrics["temperature"], legend_above, extras)
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            box = legend.get_window_extent(renderer)
            bars = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle)]
            if any(box.overlaps(b) for b in bars):
                return True
    return False


def test_the_k3_reliability_legend_sits_clear_of_the_bars(chain):
    from bundle.views.figures import RELIABILITY, estimates_of, reliability_png, render_figures

    metrics = json.loads((chain["run"] / "data" / "metrics.json").read_text())
    audit = pq.read_table(chain["run"] / "data" / "predictions" / "audit.parquet")
    logits = np.stack([audit.column(f"logit_{j}").to_numpy() for j in range(3)], axis=1).astype(np.float64)
    labels = audit.column("label").to_numpy()
    extras = estimates_of(metrics, logits, labels)
    assert extras is not None and extras["raw"].classwise is not None  # K = 3: the classwise panel too
    assert _legend_touches_bars(metrics, legend_above=False)  # the layout records before it keep
    assert not _legend_touches_bars(metrics, legend_above=True)
    assert not _legend_touches_bars(metrics, legend_above=True, extras=extras)
    drawn = (chain["run"] / "data" / "figures" / "reliability-audit.png").read_bytes()
    assert drawn == reliability_png(metrics["pools"]["audit"], metrics["temperature"], legend_above=True,
                                    extras=extras)
    old = {k: v for k, v in metrics.items() if k not in ("warnings", "truncation", "estimators")}
    assert render_figures(old, logits)[RELIABILITY] == reliability_png(
        metrics["pools"]["audit"], metrics["temperature"], legend_above=False)


def test_a_lock_with_the_classes_in_another_order_is_refused_by_init(chain, tmp_path, capsys):
    glue = edited_json(chain["lock"], chain["dir"] / "glue-lock.json",
                       lambda d: d["dataset"].update(labels=["entailment", "neutral", "contradiction"]))
    assert main(init_args(tmp_path / "p.json", "--resources", str(glue))) == 2
    err = error_line(capsys)
    assert "['entailment', 'neutral', 'contradiction']" in err and "Parquet schema metadata" in err
    assert "['contradiction', 'entailment', 'neutral']" in err
    assert not (tmp_path / "p.json").exists()


def test_a_pasted_positional_map_is_refused_and_the_suggestion_pairs_names(world, tmp_path, capsys):
    """The dataset says `entailed`: init suggests the map by names, and refuses the positional one
    it used to suggest (which ran, signed and verified at 4.9% accuracy)."""
    entailed = ["contradiction", "entailed", "neutral"]
    data = write_split(tmp_path / "ds" / DATA_PATH, world / "model", classes=entailed)
    assert main(lock_args(world, tmp_path / "lock.json", data=data)) == 0
    base = ["--resources", str(tmp_path / "lock.json")]
    assert main(init_args(tmp_path / "p.json", *base)) == 2
    err = error_line(capsys)
    assert "--label-map ENTAILMENT=entailed,NEUTRAL=neutral,CONTRADICTION=contradiction" in err
    positional = "ENTAILMENT=contradiction,NEUTRAL=entailed,CONTRADICTION=neutral"
    assert main(init_args(tmp_path / "p.json", *base, "--label-map", positional)) == 2
    err = error_line(capsys)
    assert "'ENTAILMENT' with the dataset's 'contradiction'" in err and "never by position" in err
    assert not (tmp_path / "p.json").exists()
    named = "ENTAILMENT=entailed,NEUTRAL=neutral,CONTRADICTION=contradiction"
    assert main(init_args(tmp_path / "p.json", *base, "--label-map", named)) == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["label_map"]["by"] == "explicit"
    assert [p["dataset_label"] for p in doc["label_map"]["pairs"]] == ["entailed", "neutral", "contradiction"]


def _positional(doc: dict[str, Any]) -> None:
    """What a user who edits the protocol by hand into the positional map writes."""
    doc["label_map"]["by"] = "explicit"
    for pair in doc["label_map"]["pairs"]:
        pair["dataset_label"] = CLASSES[pair["model_index"]]


def test_a_run_below_chance_says_so_everywhere_and_the_verifier_recomputes_it(chain, tmp_path, capsys):
    from verify.api import verify_path
    from verify.context import Trust
    from verify.verdict_output import table

    wrong = edited_json(chain["protocol"], tmp_path / "wrong.json", _positional)
    capsys.readouterr()
    assert main(["smoke", "--protocol", str(wrong), "--resources", str(chain["lock"])]) == 0
    assert "WARNING: accuracy" in capsys.readouterr().out
    assert main(["run", "--protocol", str(wrong), "--resources", str(chain["lock"]), "--out", str(tmp_path / "run"),
                 "--ephemeral-key", "--no-progress"]) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "data" / "metrics.json").read_text())
    accuracy = metrics["pools"]["audit"]["raw"]["accuracy"]
    assert accuracy < 1 / 3
    below = f"accuracy {accuracy:.1%} is below chance (33.3%): the label map is probably wrong"
    assert metrics["warnings"][0] == below
    assert f"WARNING: {below}." in out
    report = (tmp_path / "run" / "data" / "report.md").read_text()
    assert report.index("## Warnings") < report.index("## Question") and f"**WARNING: {below}.**" in report
    result = verify_path(tmp_path / "run", Trust())
    checks = {c.id: c for c in result.checks}
    assert checks["metrics.warnings"].status == "pass" and below in checks["metrics.warnings"].detail
    assert checks["labels.map"].status == "pass"
    assert "WARNING: it pairs model label 'ENTAILMENT' with 'contradiction', though the dataset has 'entailment'" \
        in checks["labels.map"].detail
    assert [c.id for c in result.checks if c.status == "fail" and c.id != "signature.signer-trusted"] == []
    assert "The run warns" in table(result) and below in table(result)


def test_the_verifier_refuses_warnings_that_are_missing_or_made_up(chain, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from bundle import layout
    from tests.verify.tamper import copy_bag, edit_json, reseal, update_stage_hashes
    from verify.api import verify_path
    from verify.context import Trust

    made_up = ["accuracy 99.0% is below chance (33.3%): the label map is probably wrong"]
    for n, warnings in enumerate((made_up, ["T = 20 sits at the bound t_max"])):
        bag = copy_bag(chain["run"], tmp_path / f"bag{n}")
        edit_json(bag, layout.METRICS_JSON, lambda d, w=warnings: d.update(warnings=w))
        update_stage_hashes(bag)
        reseal(bag, Ed25519PrivateKey.generate())  # the attacker's key: the signer is not what is checked
        checks = {c.id: c for c in verify_path(bag, Trust()).checks}
        assert checks["metrics.warnings"].status == "fail", checks["metrics.warnings"]
        assert checks["metrics.record"].status == "pass"


def test_the_job_and_the_verifier_word_warnings_alike():
    from job.plausibility import run_warnings
    from verify.plausibility import expected_warnings

    for accuracy in (0.0, 0.049, 0.3332, 1 / 3, 0.5, 0.99):
        for k in (2, 3, 20):
            for boundary, side, t in ((False, None, 1.7), (True, "t_max", 20.0), (True, "t_min", 0.05)):
                temperature = {"boundary": boundary, "boundary_side": side, "temperature": t, "t_min": 0.05,
                               "t_max": 20.0}
                assert run_warnings(accuracy, k, temperature) == expected_warnings(accuracy, k, temperature)
    assert run_warnings(0.049, 3, {"boundary": True, "boundary_side": "t_max", "temperature": 20.0,
                                   "t_min": 0.05, "t_max": 20.0}) == [
        "accuracy 4.9% is below chance (33.3%): the label map is probably wrong",
        ("T = 20 sits at the bound t_max of the fit interval [0.05, 20]: no temperature inside it fits, which "
         "usually means a wrong label map or a broken model")]


@pytest.mark.parametrize(("case", "edit", "words"), [
    ("null text", lambda c: c["premise"].__setitem__(4, None),
     ["1 of the split's 96 rows has a missing or non-text 'premise'", "idx 5004"]),
    ("labels out of range", lambda c: (c["label"].__setitem__(2, -1), c["label"].__setitem__(9, 3)),
     ["2 of the split's 96 rows have a 'label' outside the class indices 0..2", "[-1, 3]", "idx 5002, 5009"]),
    ("empty split", lambda c: [c[k].clear() for k in c], ["The split has no rows"]),
])
def test_bad_rows_are_refused_at_init_with_their_count_and_ids(world, tmp_path, capsys, case, edit, words):
    data = write_split(tmp_path / "ds" / DATA_PATH, world / "model", edit=edit)
    lock = tmp_path / "lock.json"
    if case == "empty split":  # `job lock` refuses it too; init must, for a lock written by hand
        assert main(lock_args(world, lock, data=data)) == 2
        assert "no rows" in error_line(capsys)
        good = write_split(tmp_path / "good" / DATA_PATH, world / "model")
        assert main(lock_args(world, lock, data=good)) == 0
        edited_json(lock, lock, lambda d: d["dataset"].update(
            files=[{**d["dataset"]["files"][0], "size": data.stat().st_size,
                    "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
                    "local_path": str(data)}]))
    else:
        assert main(lock_args(world, lock, data=data)) == 0
    assert main(init_args(tmp_path / "p.json", "--resources", str(lock))) == 2
    err = error_line(capsys)
    for w in words:
        assert w in err, err
    assert not (tmp_path / "p.json").exists()


def test_one_class_is_refused_in_the_users_words(world, tmp_path, capsys):
    one = write_split(tmp_path / "ds" / DATA_PATH, world / "model", classes=["entailment"],
                      edit=lambda c: c["label"].__init__([0] * len(c["label"])))
    assert main(lock_args(world, tmp_path / "one.json", data=one)) == 2
    err = error_line(capsys)
    assert "1 class ['entailment']" in err and "at least 2 classes" in err and "$." not in err
    model = make_hf_model(tmp_path / "model", "bert", ["ENTAILMENT"], seed=1)
    assert main(lock_args(world, tmp_path / "lock.json")) == 0
    edited_json(tmp_path / "lock.json", tmp_path / "lock.json", lambda d: d["model"].update(files=[
        {"path": p.name, "size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
         "local_path": str(p)} for p in sorted(model.iterdir())]))
    assert main(init_args(tmp_path / "p.json", "--resources", str(tmp_path / "lock.json"))) == 2
    err = error_line(capsys)
    assert "The model has 1 output ['ENTAILMENT']" in err and "at least 2 classes" in err and "$." not in err
    assert not (tmp_path / "p.json").exists()


# -- no network ----------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy in the environment, so that the hub's host is probed directly."""
    from job.hub import PROXY_VARIABLES

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


@pytest.mark.parametrize("network", ["unreachable", "refused", "HF_HUB_OFFLINE"])
def test_init_offline_says_one_sentence_naming_the_local_route(network, tmp_path, monkeypatch, capsys):
    go_online(monkeypatch)
    if network == "refused":
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    elif network == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # "unreachable": huggingface.co, and this test's sockets reach only loopback
    start = time.monotonic()
    assert main(init_args(tmp_path / "p.json", "--cache", str(tmp_path / "cache"))) == 2
    assert time.monotonic() - start < 5
    err = error_line(capsys)
    assert "--resources LOCK.json" in err and "python -m job lock" in err
    assert not (tmp_path / "p.json").exists()


def test_smoke_without_the_hub_fails_within_seconds_naming_the_local_route(chain, tmp_path, monkeypatch, capsys):
    go_online(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    start = time.monotonic()
    assert main(["smoke", "--protocol", str(chain["protocol"]), "--cache", str(tmp_path / "cache")]) == 2
    assert time.monotonic() - start < 5
    err = error_line(capsys)
    assert "cannot be reached" in err and "--resources LOCK.json" in err


# -- one protocol, whatever the route --------------------------------------------------------------

def card() -> str:
    names = "\n".join(f"          '{i}': {n}" for i, n in enumerate(CLASSES))
    return ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: validation\n"
            "    path: data/validation-*.parquet\ndataset_info:\n  config_name: default\n  features:\n"
            f"  - name: label\n    dtype:\n      class_label:\n        names:\n{names}\n---\n")


def test_the_lock_route_and_the_hub_route_write_the_same_protocol_bytes(world, tmp_path, monkeypatch):
    from job.cli import _parser
    from job.hub import hub_fetch
    from job.protocol_init import Hub, run_init
    from tests.job.test_hub_download import LocalHub

    go_online(monkeypatch)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LocalHub)
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        files = {f"/me/tiny-nli/resolve/{MODEL_SHA}/{p.name}": p.read_bytes() for p in (world / "model").iterdir()}
        files[f"/datasets/me/pairs/resolve/{DATA_SHA}/README.md"] = card().encode()
        files[f"/datasets/me/pairs/resolve/{DATA_SHA}/{DATA_PATH}"] = (world / "dataset" / DATA_PATH).read_bytes()
        LocalHub.files, LocalHub.requests, LocalHub.branches = files, [], {}
        LocalHub.lfs = {u: hashlib.sha256(b).hexdigest() for u, b in files.items()
                        if u.endswith((".safetensors", ".parquet"))}
        args = _parser().parse_args(init_args(tmp_path / "hub.json", "--cache", str(tmp_path / "cache")))
        assert run_init(args, hub=Hub(endpoint), fetch=functools.partial(hub_fetch, endpoint=endpoint)) == 0
    finally:
        server.shutdown()
    assert main(lock_args(world, tmp_path / "lock.json")) == 0
    assert main(init_args(tmp_path / "lock-route.json", "--resources", str(tmp_path / "lock.json"))) == 0
    hub_bytes, lock_bytes = (tmp_path / "hub.json").read_bytes(), (tmp_path / "lock-route.json").read_bytes()
    assert hub_bytes == lock_bytes
    doc = json.loads(hub_bytes)
    paths = [f["path"] for f in doc["resources"]["model"]["files"]]
    assert paths == sorted(paths) and "config.json" in paths and "model.safetensors" in paths
    assert list(doc["resources"]["dataset"]["columns"]) == sorted(doc["resources"]["dataset"]["columns"])


def test_behind_a_proxy_the_hub_is_not_probed_directly(monkeypatch):
    from job.hub import require_reachable

    go_online(monkeypatch)
    port = _closed_port()
    with pytest.raises(Exception, match="cannot be reached"):
        require_reachable("Reading", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    require_reachable("Reading", f"http://127.0.0.1:{port}")  # huggingface_hub goes through the proxy
