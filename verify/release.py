"""The release of this verifier, in a module of its own so that any module can name it without
importing the package's public API (verify/__init__.py re-exports it as verify.__version__)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "2.0.0"
"""The release of this verifier (the calibration-verify distribution, verify/pyproject.toml)."""
