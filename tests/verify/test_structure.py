"""The verifier's shape: one reader of the format, checks as a table the README lists, no import
cycle, and bundle/ holding only what production code uses."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from verify.checks import TABLE, Entry, Group, check_ids

REPO = Path(__file__).resolve().parents[2]

ALLOWED_FROM_BUNDLE = {
    ("bundle", "layout"),
    ("bundle", "crate_terms"),
    ("bundle", "limits"),
    ("bundle.errors", "ProtocolOutOfBounds"),
    ("bundle.predicate", "restated_claims"),
    ("bundle.terminal", "nonempty_path"),
    ("bundle.terminal", "tolerant_stdout"),
    ("bundle.userfile", "describe"),
    ("bundle.userfile", "read_user_file"),
    ("bundle.wording", "NO_CLAIM"),
    ("bundle.wording", "at_bound_warning"),
    ("bundle.wording", "below_chance_warning"),
    ("bundle.wording", "interval_verdict"),
    ("bundle.canonical", "dumps"),
    ("bundle.canonical", "loads_strict"),
    ("bundle.errors", "CanonicalJSONError"),
    ("bundle.errors", "DetailedError"),
    ("bundle.errors", "EnvelopeError"),
    ("bundle.errors", "SignatureThresholdError"),
    ("bundle.dsse", "Envelope"),
    ("bundle.crate_graph", "refs"),
    ("bundle.crate_graph", "types_of"),
    ("bundle.crate_graph", "stated_publication"),
    ("bundle.errors", "CrateError"),
    ("bundle.keys", "fingerprint"),
    ("bundle.schemas", "SCHEMA_DIR"),
    ("bundle.views", "RENDERER_PACKAGE"),
    ("bundle.views", "RENDERER_VERSION"),
    ("bundle.views.report", "JSON_FILES"),
    ("bundle.views.report", "report_markdown"),
    ("bundle.views.markdown", "text"),
    ("bundle.views.arithmetic", "arithmetic_words"),
    ("bundle.views.arithmetic", "claim_warning"),
    ("bundle.views.arithmetic", "group_words"),
    ("bundle.views.arithmetic", "short_number"),
    ("bundle.views.arithmetic", "suspicious"),
    ("bundle.views.figures", "render_figures"),
    ("bundle.arrow_arrays", "to_numpy"),
    ("bundle.memo", "memoized"),
    ("bundle.views.crate", "crate_bytes"),
    ("bundle.views.crate", "Described"),
    ("bundle.views.sweep_comparison", "render_sweep_views"),
    ("bundle.views.sweep_comparison", "sweep_markdown_v1"),
}
"""The definitions verify/ shares with the writer: layout names, the format's limits and caps
(bundle.limits) and the one bounded reader of a file a user names, canonical JSON, the DSSE
`Envelope` type (its decoding, PAE and signature check, and its errors), the predicate's shape
(bundle.predicate), the wording of warnings and interval verdicts (bundle.wording), the command
line's stdout handling (bundle.terminal), the reading of a
crate's graph (an entity's types, its references, the publication the root states), the key fingerprint,
where the schemas live, the Arrow column conversion (bundle.arrow_arrays), the memo of a
pure function's last results (bundle.memo); and the renderers of
the views (bundle.views), which lay
out records the verifier has checked with its own code, so that it can require the bundle's
report, figures and crate to be exactly their rendering (verify/README.md, "One reader of the
format"), and the rule that makes record text inert in Markdown (bundle/FORMAT.md, "Text from
records"), which the checked tables' string cells follow. Everything else verify/ re-derives. The name modules
(`bundle.layout`, `bundle.crate_terms`) are definitions through and through: any name of theirs
may be imported."""
NAME_MODULES = {"bundle.layout", "bundle.crate_terms", "bundle.limits"}


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every import in `path`, including those under TYPE_CHECKING."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def _verify_modules() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / "verify").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_verify_imports_only_shared_definitions_from_bundle() -> None:
    for module, path in _verify_modules().items():
        used = {(m, n) for m, n in _imports(path)
                if (m == "bundle" or m.startswith("bundle.")) and m not in NAME_MODULES}
        assert used <= ALLOWED_FROM_BUNDLE, f"{module} imports {sorted(used - ALLOWED_FROM_BUNDLE)}"


def test_every_public_bundle_function_is_used_by_production_code() -> None:
    sources = {p: p.read_text(encoding="utf-8")
               for d in ("job", "bundle", "verify") for p in sorted((REPO / d).rglob("*.py"))}
    unused = []
    for path in sorted((REPO / "bundle").rglob("*.py")):
        for node in ast.parse(sources[path]).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            uses = sum(len(re.findall(rf"\b{node.name}\b", text)) for text in sources.values())
            if uses < 2:  # the definition itself is one
                unused.append(f"{path.relative_to(REPO)}:{node.name}")
    assert unused == [], unused


def test_verify_modules_have_no_import_cycle() -> None:
    modules = _verify_modules()
    # `from verify import extract` imports the module verify.extract, not the package's __init__.
    graph = {name: {f"{m}.{n}" if f"{m}.{n}" in modules else m for m, n in _imports(path)}
             for name, path in modules.items()}
    graph = {name: {dep for dep in deps if dep in modules} for name, deps in graph.items()}
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == "done":
            return
        assert state.get(name) != "open", "import cycle: " + " -> ".join([*trail, name])
        state[name] = "open"
        for dep in sorted(graph[name]):
            visit(dep, [*trail, name])
        state[name] = "done"

    for name in modules:
        visit(name, [])


def _readme_ids() -> list[str]:
    text = (REPO / "verify" / "README.md").read_text(encoding="utf-8")
    section = text.split("## The checks, in order", 1)[1].split("\n## ", 1)[0]
    ids = []
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split(" | ", 1)[0]
            ids += re.findall(r"`([^`]+)`", first)
    return ids


def test_readme_lists_the_table_in_order() -> None:
    written = [cid.replace("{pool}", "<pool>").replace("{name}", "<name>")
               .replace("{which}", "<raw\\|calibrated>").replace("{n}", "<n>") for cid in check_ids()]
    assert _readme_ids() == written


def test_every_check_is_a_named_function_with_a_one_line_docstring() -> None:
    entries = [e for item in TABLE for e in (item.entries if isinstance(item, Group) else [item])]
    assert all(isinstance(e, Entry) for e in entries)
    assert len({e.id for e in entries}) == len(entries)
    for entry in entries:
        doc = entry.fn.__doc__ or ""
        assert entry.fn.__name__ != "<lambda>" and entry.fn.__module__.startswith("verify.")
        assert doc.strip() and "\n" not in doc, f"{entry.id}: {entry.fn.__qualname__}"
        assert entry.fn.__module__ != "verify.checks", f"{entry.id} belongs in its domain module"


def test_the_verifier_distribution_ships_every_module_the_verifier_imports() -> None:
    """`pip install ./verify` packs the packages verify and bundle whole (verify/_wheel_backend.py);
    every module the verifier comes to import, directly or through another, is among them, or the
    installed verifier fails at import (the fresh-venv test shows it, slowly; this shows it at once)."""
    import subprocess
    import sys

    from verify._wheel_backend import files

    code = ("import sys, verify.__main__, verify.api, verify.checks, verify.sweep_verification, verify.reproduction; "
            "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in ('bundle', 'verify', 'job'))))")
    imported = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.split()
    shipped = {path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
               for path in files() if path.endswith(".py")}
    assert imported and set(imported) <= shipped, sorted(set(imported) - shipped)
