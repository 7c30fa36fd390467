"""Standalone verifier for calibration bundles (bundle/FORMAT.md).

Checks the BagIt structure, every hash, the DSSE signature and the signer, every JSON file
against the verifier's own schemas, and recomputes the split, probabilities, metrics and the
temperature from the stored logits. Imports numpy, pyarrow, jsonschema, cryptography and the
format code in bundle/; never job/, torch, transformers or tokenizers.
"""

from __future__ import annotations

from verify.result import EXIT_FAILED, EXIT_OK, EXIT_UNREADABLE, EXIT_UNTRUSTED, Check, VerifyError

__version__ = "2.0.0"
"""The release of this verifier (the calibration-verify distribution, verify/pyproject.toml)."""

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_UNREADABLE", "EXIT_UNTRUSTED", "Check", "VerifyError",
           "__version__"]
