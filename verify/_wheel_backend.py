"""A PEP 517 backend (wheels only) for the calibration-verify distribution.

The verifier lives in the repository's verify/ and reads the format core bundle/ and schemas/,
which the job shares; this backend packs those packages whole into one wheel, so the distribution
cannot drift from the checkout it is built from, and a module added to either is shipped without
a list to keep. Standard library only: it builds
offline. The wheel is reproducible: entries sorted, fixed timestamps and permissions.

Installed layout (site-packages): verify/ (every module and report.schema.json), bundle/ (every
module of the package and its subpackages: the format core imports nothing else of the project,
tests/bundle/test_imports.py) and schemas/*.schema.json, where bundle.schemas.SCHEMA_DIR finds
them (next to bundle/).
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository checkout this distribution is built from."""
NAME = "calibration-verify"
DIST = NAME.replace("-", "_")
PACKAGES = ("verify", "bundle")
"""The packages shipped whole, every module of every subpackage (the build backend itself aside)."""
PACKAGE_DATA = ("verify/report.schema.json",)
REQUIRES = ("cryptography", "jsonschema", "matplotlib", "numpy", "pyarrow", "referencing")
"""What the packed modules import; verify/requirements.txt pins them (and theirs) with hashes."""
ENTRY_POINTS = "[console_scripts]\ncalibration-verify = verify.__main__:main\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def version() -> str:
    """The verifier's release, verify.__version__, read without importing it."""
    text = (ROOT / "verify" / "release.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__ = "([0-9.]+)"$', text, re.MULTILINE)
    if m is None:
        raise RuntimeError("verify/release.py has no __version__ = \"X.Y.Z\" line")
    return m.group(1)


def files() -> dict[str, bytes]:
    """Wheel path -> bytes of every file the distribution installs."""
    out: dict[str, bytes] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.resolve() != Path(__file__).resolve() and "__pycache__" not in path.parts:
                out[path.relative_to(ROOT).as_posix()] = path.read_bytes()
    for name in PACKAGE_DATA:
        out[name] = (ROOT / name).read_bytes()
    for pattern in ("*.schema.json", "*.digests.json"):
        for path in sorted((ROOT / "schemas").glob(pattern)):
            out[f"schemas/{path.name}"] = path.read_bytes()
    return out


def metadata() -> str:
    readme = (ROOT / "verify" / "README.md").read_text(encoding="utf-8")
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}",
             "Summary: Verify a signed calibration bundle without torch.",
             "License: Apache-2.0", "Requires-Python: >=3.11",
             *(f"Requires-Dist: {r}" for r in REQUIRES),
             "Description-Content-Type: text/markdown"]
    return "\n".join(lines) + "\n\n" + readme


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(wheel_directory: str, config_settings: object = None,
                metadata_directory: str | None = None) -> str:
    """Write the wheel into wheel_directory and return its file name."""
    info = f"{DIST}-{version()}.dist-info"
    content = files()
    content[f"{info}/METADATA"] = metadata().encode("utf-8")
    content[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: calibration-verify _wheel_backend\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    content[f"{info}/entry_points.txt"] = ENTRY_POINTS.encode("utf-8")
    record = [_record_line(p, d) for p, d in sorted(content.items())] + [f"{info}/RECORD,,"]
    content[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode("utf-8")
    name = f"{DIST}-{version()}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as whl:
        for path in [*sorted(p for p in content if not p.startswith(info)),
                     *sorted(p for p in content if p.startswith(info) and not p.endswith("RECORD")),
                     f"{info}/RECORD"]:
            entry = zipfile.ZipInfo(path, date_time=_EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, content[path])
    return name


def get_requires_for_build_wheel(config_settings: object = None) -> list[str]:
    return []
