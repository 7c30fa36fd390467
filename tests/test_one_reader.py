"""One reader of the format, in job/ and bundle/ too: nothing there parses a bundle (a DSSE
envelope, a tag manifest, a predictions Parquet file, a payload JSON file read from a bag) except
through the shared format types (`bundle.dsse.Envelope`, the manifest definitions in
`bundle.layout`) or the verifier's public API (`verify.checks.verify_tree` and its
`Verification`, `verify.predictions.PredictionsFile`).

An AST scan of every module of job/ and bundle/ for the primitives such parsing is made of, with
the list of the modules allowed each one, and why. The scanner is shown catching each kind of
violation planted in a source it has not seen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("job", "bundle")

CALLS = {
    "b64decode": "decodes a DSSE payload or signature: use bundle.dsse.Envelope",
    "standard_b64decode": "decodes a DSSE payload or signature: use bundle.dsse.Envelope",
    "urlsafe_b64decode": "decodes a DSSE payload or signature: use bundle.dsse.Envelope",
    "ParquetFile": "opens a Parquet file: use verify.predictions.PredictionsFile",
    "read_table": "reads a Parquet file: use verify.predictions.PredictionsFile",
    "read_schema": "reads a Parquet footer: use verify.predictions.PredictionsFile",
    "read_metadata": "reads a Parquet footer: use verify.predictions.PredictionsFile",
}
"""Function names whose call reads one of the bundle's binary or encoded formats."""
ENVELOPE_KEYS = {"payload", "payloadType", "signatures"}
"""Subscripting a parsed envelope by hand: use bundle.dsse.Envelope."""
JSON_PARSERS = {"loads", "loads_strict", "require_canonical"}
"""Parsers that, given the bytes of a bag read into memory (`tree.files[...]`), would parse a
bundle's payload JSON beside the verifier: use VerifiedBundle.json (the verifier's parse)."""

ALLOWED: dict[str, set[str]] = {
    "bundle/dsse.py": {"b64decode", "payload", "payloadType", "signatures"},  # the Envelope type
    "job/dataset.py": {"read_table", "ParquetFile"},  # the input dataset (Parquet/CSV/JSON rows), not a bundle
    "job/datameta.py": {"read_schema"},  # the input dataset's Hugging Face class names
    "job/protocol_init.py": {"read_table"},  # job.dataset.read_table: the input dataset's labels
    "job/lockfile.py": {"read_table"},  # job.dataset.read_table: the input dataset's labels
    "bundle/layout.py": {"manifest pattern"},  # MANIFEST_FILE_RE, MANIFEST_LINE_RE
}
"""module -> the primitives it may use, each for the reason given."""


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _reads_bag_bytes(node: ast.AST) -> bool:
    """Whether an expression subscripts the `files` of a bag read into memory (tree.files[...])."""
    return any(isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute)
               and sub.value.attr == "files" for sub in ast.walk(node))


def primitives(source: str) -> list[tuple[int, str, str]]:
    """(line, primitive, why it is one) for every bundle-parsing primitive `source` uses."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in CALLS:
                found.append((node.lineno, name, CALLS[name]))
            elif name in JSON_PARSERS and any(_reads_bag_bytes(arg) for arg in node.args):
                found.append((node.lineno, "bag JSON",
                              "parses a bag's JSON: use the verifier's parse (VerifiedBundle.json)"))
            elif (name == "compile" and node.args and isinstance(node.args[0], ast.Constant)
                  and "manifest" in str(node.args[0].value)):
                found.append((node.lineno, "manifest pattern",
                              "parses (tag) manifests: use bundle.layout's MANIFEST_* definitions"))
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and node.slice.value in ENVELOPE_KEYS):
            found.append((node.lineno, str(node.slice.value),
                          "reads an envelope by hand: use bundle.dsse.Envelope"))
    return sorted(found)


def violations(module: str, source: str) -> list[str]:
    """`module:line: primitive (why)` for every primitive `source` uses that ALLOWED does not
    grant `module` (a path relative to the repository, like "job/x.py")."""
    allowed = ALLOWED.get(module, set())
    return [f"{module}:{line}: {what} ({why})" for line, what, why in primitives(source)
            if what not in allowed]


def _modules() -> dict[str, str]:
    return {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8")
            for top in SCANNED for p in sorted((REPO / top).rglob("*.py"))}


def test_job_and_bundle_parse_no_bundle_except_through_the_shared_types() -> None:
    modules = _modules()
    assert "job/verified_bundle.py" in modules and "job/publishing/cosign.py" in modules
    found = [v for module, source in modules.items() for v in violations(module, source)]
    assert found == [], "\n".join(found)


def test_every_allowance_is_still_needed() -> None:
    """An allowance nothing uses any more is removed, so that the list stays the truth."""
    modules = _modules()
    for module, granted in ALLOWED.items():
        used = {what for _, what, _ in primitives(modules[module])}
        assert granted == used, f"{module} is granted {sorted(granted)} but uses {sorted(used)}"


PLANTED = {
    "envelope payload decoded by hand":
        "import base64, json\ndef f(raw):\n    return base64.b64decode(json.loads(raw)['payload'])\n",
    "signatures read by hand": "def f(env):\n    return [s['sig'] for s in env['signatures']]\n",
    "predictions read with pyarrow":
        "import pyarrow.parquet as pq\ndef f(p):\n    return pq.read_table(p)\n",
    "Parquet footer read": "import pyarrow.parquet as pq\nx = pq.ParquetFile('a.parquet')\n",
    "bag JSON parsed beside the verifier":
        "import json\ndef f(tree):\n    return json.loads(tree.files['data/metrics.json'])\n",
    "tag manifest lines parsed":
        "import re\nLINE = re.compile(r'tagmanifest-([a-z0-9]+)\\.txt')\n",
}


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_the_scan_catches_a_planted_violation(kind: str) -> None:
    source = PLANTED[kind]
    assert violations("job/planted.py", source), kind
    assert violations("bundle/views/planted.py", source), kind


def test_the_scan_catches_a_violation_planted_in_a_real_module() -> None:
    """A copy of job/verified_bundle.py that reads its predictions itself again fails the scan."""
    path = "job/verified_bundle.py"
    original = _modules()[path]
    assert violations(path, original) == []
    planted = original + ("\n\ndef _own_reader(data: bytes) -> object:\n"
                          "    import io\n\n    import pyarrow.parquet as pq\n\n"
                          "    return pq.read_table(io.BytesIO(data))\n")
    found = violations(path, planted)
    assert len(found) == 1 and "read_table" in found[0] and "PredictionsFile" in found[0]


def test_an_allowance_is_per_module() -> None:
    source = "import base64\nx = base64.b64decode('')\n"
    assert violations("bundle/dsse.py", source) == []
    assert violations("job/publishing/cosign.py", source) != []
