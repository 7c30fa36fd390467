"""Standalone verifier for calibration bundles (bundle/FORMAT.md).

Checks the BagIt structure, every hash, the DSSE signature and the signer, every JSON file
against the verifier's own schemas, and recomputes the split, probabilities, metrics and the
temperature from the stored logits. Imports numpy, pyarrow, jsonschema, cryptography and the
format code in bundle/; never job/, torch, transformers or tokenizers.

The public API is what this package exports (`__all__`): `verify_path` and the types of its
arguments and its result. Every other module of verify/ is internal and may change in any release.

    from verify import Trust, verify_path
    outcome = verify_path(Path("run"), Trust(key=load_trusted_key("signer.pub.pem")))
    outcome.verdict, outcome.checks, outcome.documents["data/metrics.json"], outcome.pools["audit"]
"""

from __future__ import annotations

from verify.api import VERDICTS, Outcome, extract_bag, verify_path
from verify.context import Attestation, Trust
from verify.parsed import PoolData
from verify.release import __version__
from verify.result import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_UNTRUSTED,
    SIGNER_CHECK,
    Check,
    InputError,
    VerifyError,
)
from verify.signature import load_trusted_key

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_UNREADABLE", "EXIT_UNTRUSTED", "SIGNER_CHECK", "VERDICTS",
           "Attestation", "Check", "InputError", "Outcome", "PoolData", "Trust", "VerifyError", "__version__",
           "extract_bag", "load_trusted_key", "verify_path"]
