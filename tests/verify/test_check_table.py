"""The check table declares what each check needs and provides: its order satisfies every
dependency, a misplaced entry is refused when the table is validated (at import), a check reads
only the facts it declares, a skipped check names the failed check behind it, and a failed check
carries its facts by name in the --json report."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import jsonschema
import pytest

from bundle import layout
from tests.verify.tamper import Keys, copy_bag, edit_json, reseal, synthetic_bag, verify_keys  # noqa: F401
from verify import verdict_output
from verify.api import verify_path
from verify.checks import TABLE, Entry, Group, TableError, Trust, validate
from verify.context import Context, UndeclaredFact
from verify.facts import AUTHENTICATED, FACTS, INPUTS, RUNNER
from verify.result import EXIT_FAILED, Missing

REPO = Path(__file__).resolve().parents[2]
REPORT_SCHEMA = json.loads((REPO / "verify" / "report.schema.json").read_text())


def entries(table: tuple[Entry | Group, ...] = TABLE) -> list[Entry]:
    return [e for item in table for e in (item.entries if isinstance(item, Group) else (item,))]


def test_the_order_satisfies_every_dependency() -> None:
    """Walk the table as it runs: each need is an input, a runner fact, or provided above it."""
    available = set(INPUTS | RUNNER)
    for entry in entries():
        assert set(entry.needs) <= available, (entry.id, set(entry.needs) - available)
        available |= set(entry.provides)
    assert set(FACTS) - available == set(), "a fact nothing provides"


def test_every_fact_is_needed_and_provided() -> None:
    needed = {f for e in entries() for f in e.needs}
    provided = {f for e in entries() for f in e.provides}
    assert provided <= needed, provided - needed
    assert set(FACTS) == needed | provided


def test_every_check_after_reading_needs_authentication() -> None:
    """Nothing that reads the bag runs once authentication has failed."""
    for entry in entries()[1:]:
        assert entry.needs[:1] == (AUTHENTICATED,), entry.id


def _moved(cid: str, after: str) -> tuple[Entry | Group, ...]:
    """TABLE (groups flattened) with the entry `cid` moved to just after `after`."""
    flat = entries()
    entry = next(e for e in flat if e.id == cid)
    flat.remove(entry)
    flat.insert(next(i for i, e in enumerate(flat) if e.id == after) + 1, entry)
    return tuple(flat)


@pytest.mark.parametrize(("cid", "after", "fact"), [
    ("crate.structure", "crate.files", "crate.graph"),
    ("json.{name}", "protocol.bounds", "payload.documents"),
    ("signature.valid", "signature.subjects", "signature.statement"),
    ("predictions.{pool}.columns", "fit.record", "payload.predictions"),
])
def test_a_misplaced_entry_is_an_error(cid: str, after: str, fact: str) -> None:
    validate(tuple(entries()))  # flattening alone keeps it valid
    with pytest.raises(TableError, match=fact):
        validate(_moved(cid, after))


def test_an_unknown_fact_or_a_repeated_id_is_an_error() -> None:
    first = entries()[0]
    with pytest.raises(TableError, match="does not define"):
        validate((Entry("x.y", "t", first.fn, needs=("no.such-fact",)),))
    with pytest.raises(TableError, match="twice"):
        validate((first, first))


def test_the_table_is_validated_on_import() -> None:
    source = (REPO / "verify" / "checks.py").read_text()
    assert source.rstrip().endswith("validate(TABLE)")


def test_a_check_reads_only_what_it_declares(synthetic_bag: Path) -> None:  # noqa: F811
    from verify.tree import read_tree

    ctx = Context(tree=read_tree(synthetic_bag), trust=Trust(), declared=frozenset({"bag.files"}))
    assert ctx.bag() is ctx.tree
    with pytest.raises(UndeclaredFact):
        ctx.doc(layout.METRICS_JSON)
    with pytest.raises(UndeclaredFact):
        ctx.table("audit")
    ctx.declared = frozenset({"payload.documents"})
    with pytest.raises(Missing) as missing:
        ctx.doc(layout.METRICS_JSON)
    assert (missing.value.fact, missing.value.item) == ("payload.documents", layout.METRICS_JSON)


def test_every_check_of_a_sound_bundle_runs_within_its_declarations(
        synthetic_bag: Path, verify_keys: Keys) -> None:  # noqa: F811
    """An undeclared read fails its check (UndeclaredFact), so all passing shows the table true."""
    outcome = verify_path(synthetic_bag, Trust(key=verify_keys.real.public_key(), source="k"))
    assert [c.id for c in outcome.checks if not c.ok] == []
    assert len(outcome.checks) > 50


def test_a_skip_names_the_failed_check_behind_it(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                                tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    (bag / layout.RO_CRATE_JSON).write_bytes(b"[]\n")
    reseal(bag, verify_keys.real, crate=False)
    outcome = verify_path(bag, Trust(key=verify_keys.real.public_key(), source="k"))
    by_id = {c.id: c for c in outcome.checks}
    assert by_id["crate.structure"].status == "fail"
    for cid in ("crate.files", "crate.run", "crate.signer", "crate.publication", "crate.regenerated"):
        assert by_id[cid].status == "skip", by_id[cid]
        assert by_id[cid].detail == f"skipped: {FACTS['crate.graph']} (crate.structure failed)"
    assert by_id["figures.png"].status == "pass"
    assert by_id["figures.regenerated"].detail.endswith("(crate.structure failed)")


def test_reading_is_reported_by_rows_of_the_table(tmp_path: Path) -> None:
    titles = {e.id: e.title for e in entries()}
    folder = verify_path(_unreadable_folder(tmp_path))
    first = folder.checks[0]
    assert (first.id, first.title, first.status) == ("bag.layout", titles["bag.layout"], "fail")
    archive = tmp_path / "escape.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.USTAR_FORMAT) as tar:
        member = tarfile.TarInfo("../evil")
        tar.addfile(member, io.BytesIO(b""))
    outcome = verify_path(archive)
    first = outcome.checks[0]
    assert (first.id, first.title, first.status) == ("archive.safe", titles["archive.safe"], "fail")
    assert first.details == {"member": "../evil", "reason": "path escapes with .."}
    assert all(c.status == "skip" and "archive.safe failed" in c.detail for c in outcome.checks[1:])


def _unreadable_folder(tmp_path: Path) -> Path:
    """A folder that cannot be read as a bag: it holds a path longer than any bag may."""
    from bundle import limits

    deep = root = tmp_path / "deep"
    for _ in range(limits.MAX_PATH_BYTES // 250 + 1):
        deep = deep / ("d" * 250)
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"")
    return root


def _report(bag: Path, keys: Keys) -> dict:
    outcome = verify_path(bag, Trust(key=keys.real.public_key(), source="k"))
    doc = json.loads(verdict_output.dumps_report(outcome))
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(doc)
    assert doc["exit_code"] == outcome.exit_code == EXIT_FAILED
    return {c["id"]: c for c in doc["checks"]}


def test_a_changed_file_reports_the_digests(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                            tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    before = (bag / layout.POOLS_JSON).read_bytes()
    (bag / layout.POOLS_JSON).write_bytes(before.replace(b"[", b"[ ", 1))
    failed = _report(bag, verify_keys)["bag.manifest-sha256"]

    assert failed["status"] == "fail"
    assert failed["details"] == {"path": layout.POOLS_JSON, "algorithm": "sha256",
                                 "expected": hashlib.sha256(before).hexdigest(),
                                 "found": hashlib.sha256((bag / layout.POOLS_JSON).read_bytes()).hexdigest()}


def test_a_schema_violation_reports_where(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                          tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    edit_json(bag, layout.TEMPERATURE_JSON, lambda t: t.update(temperature="hot"))
    reseal(bag, verify_keys.real)
    checks_by_id = _report(bag, verify_keys)
    failed = checks_by_id["json.temperature"]
    assert failed["details"]["file"] == layout.TEMPERATURE_JSON
    assert failed["details"]["pointer"] == "/temperature"
    assert "hot" in failed["details"]["reason"]
    assert all("details" not in c for c in checks_by_id.values() if c["status"] != "fail")


def test_a_recomputed_metric_reports_the_field(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                               tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    old: dict[str, float] = {}

    def edit(m: dict) -> None:
        old["ece"] = m["pools"]["audit"]["calibrated"]["ece"]
        m["pools"]["audit"]["calibrated"]["ece"] = old["ece"] + 0.01
    edit_json(bag, layout.METRICS_JSON, edit)
    reseal(bag, verify_keys.real)
    details = _report(bag, verify_keys)["metrics.audit.calibrated"]["details"]
    assert details["file"] == layout.METRICS_JSON
    assert details["field"] == "pools.audit.calibrated.ece"
    assert details["found"] == old["ece"] + 0.01
    assert details["expected"] == pytest.approx(old["ece"], abs=1e-9)


def test_another_pre_registered_protocol_reports_both_digests(synthetic_bag: Path,  # noqa: F811
                                                              verify_keys: Keys) -> None:  # noqa: F811
    outcome = verify_path(synthetic_bag, Trust(key=verify_keys.real.public_key(), source="k"),
                          expected_protocol_sha256="0" * 64)
    failed = {c.id: c for c in outcome.checks if c.status == "fail"}
    assert list(failed) == ["protocol.pre-registered"]
    assert dict(failed["protocol.pre-registered"].details) == {
        "path": layout.PROTOCOL_JSON, "algorithm": "sha256", "expected": "0" * 64,
        "found": hashlib.sha256((synthetic_bag / layout.PROTOCOL_JSON).read_bytes()).hexdigest()}


def test_the_verifier_errors_share_one_root() -> None:
    from verify import result

    errors = [v for v in vars(result).values()
              if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == result.__name__]
    assert {e.__name__ for e in errors} >= {"Failed", "InputError", "Missing", "DigestMismatch"}
    assert all(issubclass(e, result.VerifyError) for e in errors)
    exc = result.DigestMismatch("data/x changed.", path="data/x", algorithm="sha256",
                                expected="a" * 64, found="b" * 64)
    assert isinstance(exc, result.Failed) and str(exc) == "data/x changed."
    assert json.loads(json.dumps(dict(exc.details))) == {
        "path": "data/x", "algorithm": "sha256", "expected": "a" * 64, "found": "b" * 64}
