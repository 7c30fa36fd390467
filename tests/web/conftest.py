from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="module")
def node_ready() -> None:
    """Skip where node is absent; in CI (CI=true) its absence fails the test instead."""
    if shutil.which("node") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node must be present in CI")
        pytest.skip("node is absent")
