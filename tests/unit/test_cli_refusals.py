"""Commands that cannot run here refuse to start, in one line that says what to do: a missing optional extra
names the ``pip install`` to run, missing endpoints are each named with what they are."""

from __future__ import annotations

import os
import subprocess
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


def test_a_worker_without_its_endpoints_names_each_and_exits_2() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER_DELETION_", "TEMPORAL_"))}
    env["LEDGER_DELETION_PULSAR_URL"] = "pulsar://broker:6650"  # set, but not what this pool needs
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger_deletion.cli import main; main()",
            "worker",
            "--pool",
            "bookkeeper",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: missing settings: TEMPORAL_ADDRESS (Temporal frontend, host:port, or a profile's "
        "(TEMPORAL_PROFILE)), LEDGER_DELETION_ZOOKEEPER "
        "(ZooKeeper holding BookKeeper's ledger metadata, host:port[/chroot]), "
        "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH ('none' or the other Pulsar clusters' metadata stores "
        "sharing this BookKeeper, see docs/deployment.md#shared-bookkeeper); "
        'for the embedded stack run: eval "$(ledger-deletion stack env)"\n'
    )


def test_watch_without_the_shared_bookkeeper_declaration_refuses() -> None:
    """``watch`` requests deletes: with every endpoint set, it still refuses without being told who else
    writes to this BookKeeper (issue 39: the setting is required by every process that can request one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER_DELETION_", "TEMPORAL_"))}
    env |= {
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "LEDGER_DELETION_ZOOKEEPER": "127.0.0.1:1",
        "LEDGER_DELETION_PULSAR_URL": "pulsar://127.0.0.1:1",
    }
    done = subprocess.run(
        [sys.executable, "-c", "from ledger_deletion.cli import main; main()", "watch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: missing settings: LEDGER_DELETION_BOOKKEEPER_SHARED_WITH ("), (
        done.stderr
    )
