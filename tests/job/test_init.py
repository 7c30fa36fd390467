"""`python -m job init` against a local hub on loopback (tests.job.test_hub_download.LocalHub): tiny
BERT and RoBERTa repositories whose labels are the dataset's in another order, dataset repositories
with a card (configs, class_label names) and pair or single-text splits in JSON lines, CSV and
Parquet, of 3, 20 and 2 classes; the protocol init writes then runs unchanged (smoke, run) and the
verifier recomputes every figure of the bundle."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from job.cli import _parser, main
from job.errors import JobError
from job.hub import hub_fetch, hub_lfs_sha256
from job.protocol_init import Hub, run_init
from tests.anymodel import label_names, make_hf_model, make_rows
from tests.hub_env import go_online
from tests.job.test_hub_download import LocalHub

MODEL_SHA, DATA_SHA = "1" * 40, "2" * 40
CASES = {  # name: (architecture, K, format, pairs)
    "nli-roberta-jsonl": ("roberta", 3, "jsonl", True),
    "topics-bert-csv": ("bert", 20, "csv", False),
    "sentiment-roberta-parquet": ("roberta", 2, "parquet", False),
}


def card(k: int, fmt: str) -> str:
    names = "\n".join(f"          '{i}': {n}" for i, n in enumerate(label_names(k)))
    return ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: validation\n"
            f"    path: data/validation-*.{fmt}\n  - split: train\n    path: data/train-*.{fmt}\n"
            "dataset_info:\n  config_name: default\n  features:\n  - name: text\n    dtype: string\n"
            f"  - name: label\n    dtype:\n      class_label:\n        names:\n{names}\n---\n# a dataset\n")


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """start(case) -> endpoint: serves the case's model and dataset repositories; `main` resolves
    resources through it."""
    go_online(monkeypatch)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LocalHub)
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    import job.cli
    from job.resources import resolve_hub

    monkeypatch.setattr(job.cli, "resolve_hub", functools.partial(
        resolve_hub, fetch=functools.partial(hub_fetch, endpoint=endpoint),
        lfs=functools.partial(hub_lfs_sha256, endpoint=endpoint)))

    def start(arch: str, k: int, fmt: str, paired: bool, model_labels: list[str] | None = None) -> str:
        names = label_names(k)
        model = make_hf_model(tmp_path / "model", arch, model_labels or [n.upper() for n in reversed(names)])
        data = make_rows(tmp_path / f"validation-00000-of-00001.{fmt}", fmt, 76, k, paired, id_column="id")
        files = {f"/test/tiny-{arch}/resolve/{MODEL_SHA}/{p.name}": p.read_bytes() for p in model.iterdir()}
        files[f"/datasets/test/data/resolve/{DATA_SHA}/README.md"] = card(k, fmt).encode()
        files[f"/datasets/test/data/resolve/{DATA_SHA}/data/{data.name}"] = data.read_bytes()
        LocalHub.files, LocalHub.requests = files, []
        LocalHub.lfs = {u: hashlib.sha256(b).hexdigest() for u, b in files.items()
                        if u.endswith((".safetensors", ".parquet", ".jsonl", ".csv"))}
        LocalHub.branches = {f"models/test/tiny-{arch}@main": MODEL_SHA}
        return endpoint

    yield start
    server.shutdown()


def init_args(tmp_path: Path, arch: str, paired: bool, *extra: str, revision: str = MODEL_SHA) -> list[str]:
    return ["init", "--model", f"test/tiny-{arch}", "--model-revision", revision, "--dataset", "test/data",
            "--dataset-revision", DATA_SHA, "--split", "validation", "--text", "text",
            *(["--text-pair", "hypothesis"] if paired else []), "--label", "label", "--id", "id",
            "--name", "tiny-run", "--pools", "explore:6,calibration:30,audit:rest",
            "--out", str(tmp_path / "protocol.json"), "--cache", str(tmp_path / "cache"), *extra]


def init(endpoint: str, argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return run_init(args, hub=Hub(endpoint), fetch=functools.partial(hub_fetch, endpoint=endpoint))


@pytest.mark.parametrize("case", sorted(CASES))
def test_init_then_smoke_run_and_verify(case: str, hub, tmp_path: Path, signing_key_dir: Path):
    from verify.api import verify_path
    from verify.context import Trust

    arch, k, fmt, paired = CASES[case]
    endpoint = hub(arch, k, fmt, paired)
    assert init(endpoint, init_args(tmp_path, arch, paired)) == 0
    doc = json.loads((tmp_path / "protocol.json").read_text())
    ds = doc["resources"]["dataset"]
    assert ds["labels"] == label_names(k) and ds["format"] == fmt and ds["rows"] == 76
    assert [f["path"] for f in ds["files"]] == [f"data/validation-00000-of-00001.{fmt}"]
    assert ds.get("text_pair_column") == ("hypothesis" if paired else None)
    weights = next(f for f in doc["resources"]["model"]["files"] if f["path"] == "model.safetensors")
    assert weights["sha256"] == hashlib.sha256((tmp_path / "model" / "model.safetensors").read_bytes()).hexdigest()
    assert [p["dataset_label"] for p in doc["label_map"]["pairs"]] == list(reversed(label_names(k)))
    assert [p["size"] for p in doc["split"]["pools"]] == [6, 30, 40]
    protocol = ["--protocol", str(tmp_path / "protocol.json"), "--cache", str(tmp_path / "cache")]
    assert main(["smoke", *protocol]) == 0
    out = tmp_path / "run"
    assert main(["run", *protocol, "--out", str(out), "--signing-key", str(signing_key_dir / "signing-key.pem"),
                 "--no-progress"]) == 0
    assert json.loads((out / "data" / "resources.json").read_text())["profile"] == "formal"
    result = verify_path(out, Trust())
    failed = [(c.id, c.detail) for c in result.checks if c.status != "pass" and c.id != "signature.signer-trusted"]
    assert failed == []
    assert "labels.map" in {c.id for c in result.checks}


def test_a_branch_name_is_refused_with_its_commit(hub, tmp_path: Path):
    endpoint = hub("bert", 2, "parquet", False)
    with pytest.raises(JobError, match=f"--model-revision 'main' is a branch.*--model-revision {MODEL_SHA}"):
        init(endpoint, init_args(tmp_path, "bert", False, revision="main"))
    assert not (tmp_path / "protocol.json").exists()


def test_unnamed_labels_stop_init_with_both_label_sets_and_no_positional_suggestion(hub, tmp_path: Path):
    endpoint = hub("bert", 3, "csv", False, model_labels=["LABEL_0", "LABEL_1", "LABEL_2"])
    with pytest.raises(JobError) as err:
        init(endpoint, init_args(tmp_path, "bert", False))
    msg = str(err.value)
    assert "['LABEL_0', 'LABEL_1', 'LABEL_2']" in msg and "['entailment', 'neutral', 'contradiction']" in msg
    assert "LABEL_0=" not in msg and "give the map explicitly" in msg and "\n" not in msg
    assert not (tmp_path / "protocol.json").exists()
    assert init(endpoint, init_args(tmp_path, "bert", False, "--label-map",
                                    "LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment")) == 0
    doc = json.loads((tmp_path / "protocol.json").read_text())
    assert doc["label_map"]["by"] == "explicit"
    assert [p["dataset_label"] for p in doc["label_map"]["pairs"]] == ["contradiction", "neutral", "entailment"]


def test_init_through_the_command_line_refuses_a_branch_in_one_sentence(tmp_path: Path, capsys):
    rc = main(init_args(tmp_path, "bert", False, "--resources", str(tmp_path / "lock.json"), revision="main"))
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --model-revision 'main' is not a commit") and "\n" not in err


def test_init_refuses_an_estimator_out_of_range_and_writes_nothing(hub, tmp_path: Path):
    arch, k, fmt, paired = CASES[min(CASES)]
    endpoint = hub(arch, k, fmt, paired)
    bad = tmp_path / "estimators.json"
    bad.write_text(json.dumps([{"id": "smooth", "kind": "smooth-ece", "bandwidth": 0, "eps": 0.001, "refine": 10,
                                "mesh": 200}]))
    with pytest.raises(JobError) as caught:
        init(endpoint, init_args(tmp_path, arch, paired, "--estimators", str(bad)))
    assert "$.metrics.estimators[0].bandwidth" in str(caught.value)
    assert not (tmp_path / "protocol.json").exists()
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"id": "ks", "kind": "ks"}]))
    assert init(endpoint, init_args(tmp_path, arch, paired, "--estimators", str(good))) == 0
    assert json.loads((tmp_path / "protocol.json").read_text())["metrics"]["estimators"] == [{"id": "ks", "kind": "ks"}]


def test_init_writes_the_linear_kernels_only_when_asked(hub, tmp_path: Path):
    arch, k, fmt, paired = CASES[min(CASES)]
    endpoint = hub(arch, k, fmt, paired)
    assert init(endpoint, init_args(tmp_path, arch, paired)) == 0
    assert "linear_kernels" not in json.loads((tmp_path / "protocol.json").read_text())["inference"]
    (tmp_path / "protocol.json").unlink()
    assert init(endpoint, init_args(tmp_path, arch, paired, "--linear-kernels", "onednn")) == 0
    assert json.loads((tmp_path / "protocol.json").read_text())["inference"]["linear_kernels"] == "onednn"
