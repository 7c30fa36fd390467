"""`python -m verify DIR` on a sweep directory: a complete sweep verifies; a tampered plan or
index, a dropped, swapped or added member, an edited view or a missing index are rejected; a
member the index reports as failed is shown and the sweep does not pass."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bundle import layout
from bundle.dsse import Envelope
from job.publishing.signing_keys import generate, load_private_key
from job.publishing.sweep_statements import signed_record
from tests.sweeps import build_sweep_dir, write_bad_lock, write_sweep
from verify.__main__ import main as verify_main
from verify.sweep_verification import SWEEP_CHECKS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep_dir(tiny_world: tuple[Path, Path], signing_key_dir: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 3-member sweep (prefixes a:, b:, c:). Read-only: copy before tampering."""
    root = tmp_path_factory.mktemp("sweep")
    sweep = write_sweep(root / "sweep.json", tiny_world, prefixes=["a:", "b:", "c:"])
    rows = build_sweep_dir(sweep, root / "out", signing_key_dir / "signing-key.pem")
    assert [r["status"] for r in rows] == ["done", "done", "done"]
    return root / "out"


def _verify(path: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str], str]:
    code = verify_main([str(path), "--trusted-key", str(key_dir / "signing-key.pub.pem")])
    out = capsys.readouterr().out
    status = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0] in {"PASS", "FAIL", "FAILED"}:
            key = " ".join(line.split()[1:3]) if parts[1] == "member" else parts[1]
            status[key] = parts[0]
    return code, status, out


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "sweep"
    shutil.copytree(src, dst)
    return dst


def test_a_complete_sweep_verifies_in_one_table(sweep_dir: Path, signing_key_dir: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, status, out = _verify(sweep_dir, signing_key_dir, capsys)
    assert code == 0, out
    assert [status[cid] for cid, _ in SWEEP_CHECKS] == ["PASS"] * len(SWEEP_CHECKS)
    assert {k: v for k, v in status.items() if k.startswith("member ")} == {
        "member a": "PASS", "member b": "PASS", "member c": "PASS"}
    assert "VERIFIED" in out and out.count("STATUS") == 1


def test_the_index_summaries_are_the_members_records(sweep_dir: Path) -> None:
    index = json.loads(Envelope.from_json((sweep_dir / layout.SWEEP_INDEX).read_bytes()).payload)
    for row in index["predicate"]["members"]:
        bag = sweep_dir / layout.SWEEP_MEMBERS / row["name"]
        metrics = json.loads((bag / layout.METRICS_JSON).read_text())
        temperature = json.loads((bag / layout.TEMPERATURE_JSON).read_text())
        assert row["summary"]["temperature"] == temperature["temperature"]
        assert row["summary"]["metrics"]["ece"]["calibrated"] == metrics["pools"]["audit"]["calibrated"]["ece"]
        assert row["summary"]["metrics"]["ece"]["difference"] is not None
    temps = [r["summary"]["temperature"] for r in index["predicate"]["members"]]
    assert len(set(temps)) == 3  # the split alone moves T


def _resign(path: Path, edit: Callable[[dict], None], key_path: Path) -> None:  # type: ignore[type-arg]
    statement = json.loads(Envelope.from_json(path.read_bytes()).payload)
    edit(statement)
    envelope, _ = signed_record(statement, load_private_key(key_path))
    path.write_bytes(envelope)


def _flip_payload_byte(path: Path) -> None:
    env = json.loads(path.read_bytes())
    payload = bytearray(Envelope.from_dict(env).payload)
    i = payload.index(b'"name":"') + 8
    payload[i] = ord("z") if payload[i] != ord("z") else ord("y")
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    path.write_text(json.dumps(env))


@pytest.mark.parametrize(("tamper", "failing"), [
    ("plan-byte", "sweep.plan"),
    ("index-byte", "sweep.index"),
    ("index-drops-member", "sweep.index"),
    ("index-other-key", "sweep.index"),
    ("index-summary-edited", "sweep.members"),
    ("member-dropped", "sweep.members-folder"),
    ("members-swapped", "sweep.members"),
    ("unplanned-member", "sweep.members-folder"),
    ("view-edited", "sweep.views"),
    ("no-index", "sweep.index"),
    ("sweep-file-edited", "sweep.file"),
])
def test_tampering_is_rejected(tamper: str, failing: str, sweep_dir: Path, signing_key_dir: Path,
                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(sweep_dir, tmp_path)
    key = signing_key_dir / "signing-key.pem"
    members = d / layout.SWEEP_MEMBERS
    if tamper == "plan-byte":
        _flip_payload_byte(d / layout.SWEEP_PLAN)
    elif tamper == "index-byte":
        _flip_payload_byte(d / layout.SWEEP_INDEX)
    elif tamper == "index-drops-member":  # re-signed by the right key, but one planned member left out
        def drop(st: dict) -> None:  # type: ignore[type-arg]
            st["predicate"]["members"] = st["predicate"]["members"][1:]
            st["subject"] = [s for s in st["subject"] if not s["name"].startswith("members/a/")]
        _resign(d / layout.SWEEP_INDEX, drop, key)
        failing = "sweep.index-plan"
    elif tamper == "index-other-key":
        generate(tmp_path / "other")
        _resign(d / layout.SWEEP_INDEX, lambda st: None, tmp_path / "other" / "signing-key.pem")
    elif tamper == "index-summary-edited":
        def better(st: dict) -> None:  # type: ignore[type-arg]
            st["predicate"]["members"][0]["summary"]["metrics"]["ece"]["calibrated"] = 0.001
        _resign(d / layout.SWEEP_INDEX, better, key)
    elif tamper == "member-dropped":
        shutil.rmtree(members / "b")
    elif tamper == "members-swapped":
        (members / "a").rename(members / "tmp")
        (members / "b").rename(members / "a")
        (members / "tmp").rename(members / "b")
    elif tamper == "unplanned-member":
        shutil.copytree(members / "a", members / "d")
    elif tamper == "view-edited":
        md = d / layout.SWEEP_MD
        md.write_text(md.read_text().replace("3 members planned", "2 members planned"))
    elif tamper == "no-index":
        (d / layout.SWEEP_INDEX).unlink()
    elif tamper == "sweep-file-edited":
        (d / layout.SWEEP_FILE).write_text((d / layout.SWEEP_FILE).read_text() + " ")
    code, status, out = _verify(d, signing_key_dir, capsys)
    assert code == 1, out
    assert status[failing] == "FAIL", out
    assert "NOT VERIFIED" in out
    if failing == "sweep.members-folder":  # names only what is wrong, never an empty list
        assert "[]" not in out and ("lacks the bundle of 1 done member(s) (b)" in out
                                    or "not done members (d), 1 of them not planned at all (d)" in out), out


def test_a_reported_failure_is_shown_and_the_sweep_does_not_pass(
        tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = write_bad_lock(tmp_path / "bad-lock.json", tiny_world[1])
    sweep = write_sweep(tmp_path / "sweep.json", tiny_world, prefixes=["a:"],
                        models=[{"label": "good"}, {"label": "bad", "lock": str(bad)}])
    rows = build_sweep_dir(sweep, tmp_path / "out", signing_key_dir / "signing-key.pem")
    assert [r["status"] for r in rows] == ["done", "failed"]
    assert "sha256" in rows[1]["error"] and "\n" not in rows[1]["error"]
    assert sorted(p.name for p in (tmp_path / "out" / layout.SWEEP_MEMBERS).iterdir()) == ["good-a"]
    code, status, out = _verify(tmp_path / "out", signing_key_dir, capsys)
    assert code == 1
    assert status["member bad-a"] == "FAILED" and status["member good-a"] == "PASS"
    assert "reported failure" in out
    assert [c for c, _ in SWEEP_CHECKS if status[c] == "FAIL"] == ["sweep.complete"], out
    assert "bad-a | failed" in (tmp_path / "out" / layout.SWEEP_MD).read_text()


def test_reproductions_are_checked_with_the_member_they_name(
        sweep_dir: Path, tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization

    from job.publishing.archive import archive
    from job.sweep_reproduce import ReproduceTask, reproduce_member
    from job.sweep_spec import absolute_lock

    generate(tmp_path / "rep")
    pem = load_private_key(tmp_path / "rep" / "signing-key.pem").private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    data = archive(sweep_dir / layout.SWEEP_MEMBERS / "b", tmp_path / "b.tar.gz").read_bytes()
    outcome = reproduce_member(ReproduceTask("b", data, pem, absolute_lock(tiny_world[1]), None))
    assert outcome.reproduced and outcome.attestation is not None, outcome.error
    att = tmp_path / "b.intoto.json"
    att.write_bytes(outcome.attestation)
    base = [str(sweep_dir), "--trusted-key", str(signing_key_dir / "signing-key.pub.pem"), "--reproduction", str(att)]
    assert verify_main([*base, "--trusted-reproducer", str(tmp_path / "rep" / "signing-key.pub.pem")]) == 0
    out = capsys.readouterr().out
    assert "1 reproduction(s) accepted" in out and "PASS    sweep.reproductions" in out
    # signed by a key nobody trusts as a reproducer: the member it names does not pass
    assert verify_main([*base, "--trusted-reproducer", str(signing_key_dir / "signing-key.pub.pem")]) == 1
    out = capsys.readouterr().out
    assert "FAIL    member b" in out and "FAIL    sweep.reproductions" in out
    # an attestation of a bundle outside the sweep names no member
    other = json.loads(att.read_bytes())
    payload = json.loads(Envelope.from_dict(other).payload)
    for subject in payload["subject"]:
        subject["digest"]["sha256"] = "ab" * 32
    other["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert verify_main([*base[:-1], str(tmp_path / "other.json"), "--trusted-reproducer",
                        str(tmp_path / "rep" / "signing-key.pub.pem")]) == 1
    assert "name no done member" in capsys.readouterr().out


def test_a_sweep_needs_a_trusted_key(sweep_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main([str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert "--trusted-key" in err and len(err.strip().splitlines()) == 1


def test_the_sweep_verifier_loads_neither_torch_nor_ray() -> None:
    code = ("import sys, verify.__main__, verify.sweep_verification\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'ray', 'job', 'transformers'})\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_readme_lists_the_sweep_checks_in_order() -> None:
    text = (REPO / "verify" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Sweeps", 1)[1].split("\n## ", 1)[0]
    ids = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert ids == [cid for cid, _ in SWEEP_CHECKS]


def test_a_sweep_meets_the_threshold_or_fails(sweep_dir: Path, signing_key_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """--threshold 2 with two trusted keys: the plan, the index and the members are signed by one."""
    generate(tmp_path / "other")
    keys = ["--trusted-key", str(signing_key_dir / "signing-key.pub.pem"),
            "--trusted-key", str(tmp_path / "other" / "signing-key.pub.pem")]
    assert verify_main([str(sweep_dir), *keys, "--threshold", "2"]) == 1
    out = capsys.readouterr().out
    assert "FAIL    sweep.plan" in out and "fewer than the threshold of 2" in out
    assert verify_main([str(sweep_dir), *keys[:2], "--threshold", "2"]) == 2
    assert "cannot be met by 1 trusted key" in capsys.readouterr().err
    assert verify_main([str(sweep_dir), *keys, "--threshold", "1"]) == 0


def test_an_oversized_plan_or_index_is_refused_unread(sweep_dir: Path, signing_key_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Signed by the trusted key, but beyond the format's bound: a failed check, and the statement
    is never parsed (loads_strict is not called on it)."""
    import verify.sweep_verification as vs

    d = _copy(sweep_dir, tmp_path)
    key = signing_key_dir / "signing-key.pem"
    bound = layout.sweep_index_max_bytes(3)

    def pad(st: dict) -> None:  # type: ignore[type-arg]
        st["predicate"]["members"][0]["summary"]["padding"] = "x" * bound
    _resign(d / layout.SWEEP_INDEX, pad, key)
    assert (d / layout.SWEEP_INDEX).stat().st_size > bound
    parsed: list[str] = []
    real = vs.loads_strict
    monkeypatch.setattr(vs, "loads_strict", lambda data, source="": parsed.append(source) or real(data, source=source))
    code, status, out = _verify(d, signing_key_dir, capsys)
    assert code == 1 and status["sweep.index"] == "FAIL", out
    assert f"over the {bound:,} the format allows for this index; it was not read" in out
    assert "The index" not in parsed  # the plan's statement was parsed, the index's never
    with open(d / layout.SWEEP_PLAN, "ab") as fh:  # a plan past the format's limit, sparse on disk
        fh.truncate(layout.SWEEP_MAX_PLAN_BYTES + 1)
    code, status, out = _verify(d, signing_key_dir, capsys)
    assert code == 1 and status["sweep.plan"] == "FAIL" and "it was not read" in out, out


def test_unsigned_files_at_the_root_are_listed_never_part_of_the_verdict(
        sweep_dir: Path, signing_key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _copy(sweep_dir, tmp_path)
    (d / "APPROVED.md").write_text("Approved by the board.\n")
    (d / "figures" / "better.png").write_bytes(b"\x89PNG")
    (d / "extra").mkdir()
    code, _status, out = _verify(d, signing_key_dir, capsys)
    assert code == 0, out
    notes = out.split("Unsigned notes", 1)[1]
    for name in ("APPROVED.md", "figures/better.png", "extra/"):
        assert f"  - {name}: an unsigned file at the sweep's root" in notes, out
    assert "sweep.md:" not in notes and "plan.intoto.json:" not in notes
    code, _status, out = _verify(sweep_dir, signing_key_dir, capsys)
    assert code == 0 and "Unsigned notes" not in out


def test_a_failed_members_error_fits_the_indexs_bound() -> None:
    from job.sweep_run import _failed_row
    from job.sweep_spec import Member

    member = Member("m", b"{}", "0" * 64, None, {})
    row = _failed_row(member, "é\x01" * 5000 + "\n tail")
    assert row["error"].isascii() and row["error"].isprintable()
    assert len(row["error"]) == layout.SWEEP_ERROR_CHARS and row["error"].startswith("\\xe9\\x01")


def test_sweep_md_sums_up_across_members_and_an_earlier_layout_still_verifies(
        sweep_dir: Path, signing_key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bundle.views.sweep_comparison import sweep_markdown_v1

    md = (sweep_dir / layout.SWEEP_MD).read_text()
    index = json.loads(base64.b64decode(json.loads((sweep_dir / layout.SWEEP_INDEX).read_bytes())["payload"]))
    rows = index["predicate"]["members"]
    assert "| member | status | T | n | NLL | NLL change | ECE | ECE change | Brier | Brier change |" in md
    for r in rows:  # every headline figure's interval, side by side, per member
        for k in ("nll", "ece", "brier"):
            d = r["summary"]["metrics"][k]["difference"]
            assert f"{d['point']:+.6f} [{d['lower']:+.6f}, {d['upper']:+.6f}]" in md
    across = md.split("## Across the 3 done members", 1)[1].split("## Figures", 1)[0]
    temps = sorted(r["summary"]["temperature"] for r in rows)
    assert f"| T | {temps[1]:.6f} | {temps[0]:.6f} | {temps[2]:.6f} | |" in across
    ece = [r["summary"]["metrics"]["ece"]["difference"] for r in rows]
    below = sum(d["upper"] < 0 for d in ece)
    above = sum(d["lower"] > 0 for d in ece)
    assert f"| {below} / {3 - below - above} / {above} |" in across.split("| ECE change |", 1)[1].splitlines()[0]
    # a sweep written before the summary keeps verifying; an edit of that layout does not
    d = _copy(sweep_dir, tmp_path)
    plan = json.loads(base64.b64decode(json.loads((d / layout.SWEEP_PLAN).read_bytes())["payload"]))
    earlier = sweep_markdown_v1(plan["predicate"], index["predicate"])
    (d / layout.SWEEP_MD).write_bytes(earlier)
    code, status, out = _verify(d, signing_key_dir, capsys)
    assert code == 0 and "sweep.md in the layout of sweeps written before" in out, out
    (d / layout.SWEEP_MD).write_bytes(earlier.replace(b"3 members planned", b"2 members planned"))
    code, status, out = _verify(d, signing_key_dir, capsys)
    assert code == 1 and status["sweep.views"] == "FAIL", out
