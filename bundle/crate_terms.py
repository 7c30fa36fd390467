"""Terms of data/ro-crate-metadata.json (bundle/FORMAT.md "ro-crate-metadata.json") that the writer
(job/rocrate.py) and the verifier (verify/crate.py) must spell the same way: the RO-Crate context
and profile, the @ids of the entities the format fixes, and the @type names it uses.

Entity @ids of payload files are their names inside data/ (the crate root), see layout.data_name."""

from __future__ import annotations

from typing import Final

from bundle.layout import ENVIRONMENT_JSON, PROTOCOL_JSON, RO_CRATE_JSON, data_name

CONTEXT: Final = "https://w3id.org/ro/crate/1.2/context"
PROFILE: Final = "https://w3id.org/ro/crate/1.2"
PROFILE_VERSION: Final = "1.2"

# Entity @ids.
DESCRIPTOR: Final = data_name(RO_CRATE_JSON)
ROOT: Final = "./"
RUN: Final = "#run"
INPUT_MODEL: Final = "#input-model"
INPUT_DATASET: Final = "#input-dataset"
INPUTS: Final = {"model": INPUT_MODEL, "dataset": INPUT_DATASET}
"""Resource kind (a key of resources.json) -> the entity of the files the run read."""
SIGNER_KEY: Final = "#signer-key"
SOFTWARE_COMMIT: Final = "#software-commit"
CONTAINER_IMAGE: Final = "#container-image"
NO_LICENSE: Final = "#license-not-stated"
"""The license of a crate that states none (crates written before the job stated one)."""
PUBLISHER: Final = "#publisher"
AUTHOR_PREFIX: Final = "#author-"
"""The publisher and the authors have their identifier (ROR, ORCID or a home page) as @id, or else
#publisher and #author-1, #author-2, ... (in the order the root lists them)."""
SOFTWARE_ID: Final = "https://calibration-runs.example/software/calibration-runs"
FINGERPRINT_PROPERTY: Final = "https://calibration-runs.example/terms/ed25519-public-key-sha256"

INPUT_FILES: Final = (data_name(PROTOCOL_JSON),)
"""Payload files the run reads (the object of RUN besides INPUTS); every other one is a result."""
VOLATILE: Final = frozenset({data_name(ENVIRONMENT_JSON)})
"""Payload files that differ between two runs on the same inputs, in size too: not data entities of
the crate (RO-Crate recommends a size for every File; the bag manifests hash them), so that the
crate stays byte-identical between such runs. Crates written before may describe them without
size or hash."""

MEDIA_TYPES: Final = {".json": "application/json", ".parquet": "application/vnd.apache.parquet",
                      ".png": "image/png", ".md": "text/markdown"}
"""File suffix -> encodingFormat of its File entity (application/octet-stream otherwise)."""

# @type names.
CREATIVE_WORK: Final = "CreativeWork"
DATASET: Final = "Dataset"
FILE: Final = "File"
CREATE_ACTION: Final = "CreateAction"
SOFTWARE_APPLICATION: Final = "SoftwareApplication"
PROPERTY_VALUE: Final = "PropertyValue"
ORGANIZATION: Final = "Organization"
CONTACT_POINT: Final = "ContactPoint"
PERSON: Final = "Person"
PROFILE_TYPE: Final = "Profile"
