"""The hub client's offline switch for tests that serve a hub on loopback."""
from __future__ import annotations

import pytest


def go_online(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset HF_HUB_OFFLINE for this test as a process started without it would see it.

    huggingface_hub reads the variable once, when it is first imported, and every test runs with it
    set (tests/conftest.py); so its copy is patched too, whichever test imported it first."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
