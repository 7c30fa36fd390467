"""The views a bundle shows its readers, rendered from its records: `report.md`, the figures and
`ro-crate-metadata.json` (bundle/FORMAT.md, "Derived files").

Each module is a pure function from parsed records (and, for the crate, the payload's bytes) to
the bytes of one view; none reads a file. The job writes the views with them; the verifier renders
them again from the records it has checked and requires the bundle's files to equal its own, byte
for byte, so that nothing a reader sees is the signer's word alone. Numbers are never computed
here: every number a view shows is read from a record, and the verifier checks the records with
its own code.

A bundle records which renderer wrote its views (environment.json `packages`, under
RENDERER_PACKAGE) next to the matplotlib version that drew its figures; a verifier whose renderer
differs says so instead of comparing."""

from __future__ import annotations

from typing import Final

RENDERER_VERSION: Final = "1"
"""The version of these renderers. Raise it whenever a view's bytes change for the same records,
so that a verifier can tell a bundle rendered otherwise from a tampered one. Bundles that record
no version were rendered by version 1."""
RENDERER_PACKAGE: Final = "calibration-runs-views"
"""The key of environment.json `packages` under which the job records RENDERER_VERSION."""
STATED_REVISION: Final = "revision stated by the protocol's author"
"""What the report and the crate call a revision read from local files: never confirmed by a hub."""
