"""The demo's shadow-then-live steps on the stack: the whole demo passes with them, and their agreement check
finds each way live mode can differ from what shadow mode said."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster import SimulatedCluster
from devstack.demo_shadow import agreement
from ledger_deletion.contracts import DeletionResult, Mode, Outcome
from ledger_deletion.formats.bk_paths import ledger_path

pytestmark = pytest.mark.stack

SECTIONS = [
    "2. pools in shadow mode",
    "4. shadow mode decides every request",
    "5. what live mode would delete",
    "6. pools in live mode",
    "7. what happened",
]


def test_the_demo_decides_in_shadow_then_deletes_live_and_passes() -> None:
    command = shutil.which("ledger-deletion", path=str(Path(sys.executable).parent))
    assert command is not None
    env = {**os.environ, "COLUMNS": "220"}  # one table row a line, so each line below can be found
    done = subprocess.run([command, "demo"], capture_output=True, text=True, env=env, timeout=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    at = [out.find(section) for section in SECTIONS]
    assert all(i >= 0 for i in at) and at == sorted(at), (at, out)
    shadow, live = out[at[2] : at[3]], out[at[4] :]
    assert "what live mode would delete (WOULD_DELETE)" in shadow
    assert "✓ ZooKeeper and S3 unchanged" in shadow
    assert "✓ live subscription holds 18 of 18 messages" in shadow
    assert "✓ dead letters: 0" in shadow
    assert "✓ live deleted what shadow said: 10 runs" in live
    assert "undecodable payloads sent to" in live and ": 1 of 1" in live
    assert out.rstrip().endswith("demo passed")


def _result(outcome: Outcome, ledger_id: int, *, keys: list[str], size: int = 100) -> DeletionResult:
    shadow = outcome is Outcome.WOULD_DELETE
    return DeletionResult(
        outcome,
        ledger_id,
        "LEDGER",
        mode=Mode.SHADOW if shadow else Mode.LIVE,
        would_delete_keys=keys if shadow else [],
        bytes=size,
    )


def test_agreement_names_each_difference_between_shadow_and_live(
    cluster: SimulatedCluster, new_ledger_id: Any
) -> None:
    # Not from the stack's id generator: test_demo_own_state plants another cluster's ledgers at the ids it
    # hands out next, and "gone" must be a ledger nobody wrote.
    kept, gone, skipped, resized = (new_ledger_id() for _ in range(4))
    cluster.add_foreign_ledger(kept)  # a znode that is still there
    path = {i: ledger_path(i, cluster.ledgers_root) for i in (kept, gone, skipped, resized)}
    shadow = [_result(Outcome.WOULD_DELETE, i, keys=[path[i]]) for i in (kept, gone, skipped, resized)]
    live = [
        _result(Outcome.DELETED, kept, keys=[]),
        _result(Outcome.DELETED, gone, keys=[]),
        _result(Outcome.SKIPPED_IN_USE, skipped, keys=[]),
        _result(Outcome.DELETED, resized, keys=[], size=99),
    ]
    assert agreement(cluster, shadow[1:2], live[1:2]) == []
    problems = agreement(cluster, shadow, live)
    assert sorted(problems) == sorted(
        [
            f"{path[kept]} still exists",
            f"LEDGER {skipped}: shadow would delete it, live did not",
            f"LEDGER {resized}: 99 bytes deleted, shadow said 100",
        ]
    )
    extra = _result(Outcome.DELETED, kept + 10_000, keys=[])
    assert agreement(cluster, [], [extra]) == [f"LEDGER {kept + 10_000}: live deleted it, shadow would not"]
