"""job/ takes every payload name and RO-Crate term from bundle.layout and bundle.crate_terms: a name
spelled out again in job/ is a second definition that can drift from the one the verifier reads."""

from __future__ import annotations

import ast
from pathlib import Path

from bundle import crate_terms, layout

JOB = Path(__file__).resolve().parents[2] / "job"

PAYLOAD = {*layout.PAYLOAD_SCHEMAS, *layout.PAYLOAD_FILES, *layout.PREDICTIONS.values()}
NAMES = PAYLOAD | {layout.data_name(p) for p in PAYLOAD}
TERMS = {v for k, v in vars(crate_terms).items() if k.isupper() and isinstance(v, str)}
DIRS = {layout.data_name(p).rsplit("/", 1)[0] + "/" for p in PAYLOAD if p.count("/") > 1}
PREFIXES = (f"{layout.DATA_DIR}/", *DIRS)
SUFFIXES = (".parquet", ".png")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the constants that are docstrings (prose may name files)."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def spelled_names(source: str) -> list[str]:
    """String constants (f-string parts included) that are, or build, a payload name or crate term."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            s = node.value
            if s in NAMES or s in TERMS or s.startswith(PREFIXES) or s.endswith(SUFFIXES):
                found.append(s)
    return found


def test_the_check_catches_a_spelled_out_name() -> None:
    assert spelled_names('x = "temperature.json"') == ["temperature.json"]
    assert spelled_names('x = f"predictions/{pool}.parquet"') == ["predictions/", ".parquet"]
    assert spelled_names('x = {"@id": "#run"}') == ["#run"]
    assert spelled_names('def f():\n    """Reads temperature.json."""\n    return layout.TEMPERATURE_JSON') == []


def test_job_spells_out_no_payload_name_or_crate_term() -> None:
    offenders = {path.name: names for path in sorted(JOB.glob("*.py"))
                 if (names := spelled_names(path.read_text()))}
    assert offenders == {}, "use bundle.layout / bundle.crate_terms instead"
