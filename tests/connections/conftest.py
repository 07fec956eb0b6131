"""Fixtures of the connection tests: an environment of the test's own (no TEMPORAL_* or LEDGER_DELETION_*
of the caller's, no user configuration file) and a PKI made for the test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tls_support import Pki, make_pki


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("TEMPORAL_", "LEDGER_DELETION_")):
            monkeypatch.delenv(name)
    # Temporal's default configuration file lives in the user's configuration directory.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    return monkeypatch


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")
