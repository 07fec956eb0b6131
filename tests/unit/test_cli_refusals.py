"""A command whose optional extra is missing says which ``pip install`` to run, in one line."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from ledger_deletion.cli import EXTRAS, app

SPARK_MODULES = EXTRAS["spark"][1]


@pytest.mark.parametrize("module", SPARK_MODULES)
def test_reconcile_without_the_spark_extra_names_the_install(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what an interpreter without the module sees
    result = CliRunner().invoke(app, ["reconcile", "--out", "never-written"])
    assert result.exit_code == 2
    assert result.stderr == "reconcile needs the Spark extra: pip install 'ledger-deletion[spark]'\n"
    assert result.stdout == ""


def test_reconcile_stays_listed_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "reconcile" in result.stdout


def test_with_the_extra_the_command_itself_runs() -> None:
    # Its own argument check answers, so the guard let it through (no stack, no Spark session needed).
    result = CliRunner().invoke(app, ["reconcile", "--min-age", "soon"])
    assert result.exit_code == 2
    assert "--min-age" in result.stderr and "extra" not in result.stderr
