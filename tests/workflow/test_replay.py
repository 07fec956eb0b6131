"""Recorded histories must replay against the current workflow code (catches non-deterministic edits).

The histories in ``histories/`` were recorded from real runs on the dev server. When a change to the workflow
makes this test fail, the change would break workflows already running in production: guard it (a new input
field with a default, or ``workflow.patched()``) and record the new shape under a new prefix next to the old
files (``python -m tests.workflow.record_histories PREFIX``).

Each history replays twice: outside the sandbox, as the service runs workflows, and in the SDK's sandbox,
which also fails on a restricted call (clock, random, I/O) in the workflow code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from ledger_deletion.settings import Settings
from workers.pools import workflow_runner
from workflows.ledger_deletion import LedgerDeletionWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


RUNNERS = {"unsandboxed": Settings(), "sandboxed": Settings(workflow_sandbox=True)}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path, runner: str) -> None:
    history = WorkflowHistory.from_json(f"recorded-{path.stem}", path.read_text())
    replayer = Replayer(workflows=[LedgerDeletionWorkflow], workflow_runner=workflow_runner(RUNNERS[runner]))
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


def test_histories_were_recorded() -> None:
    cases = {"deleted", "in_use_then_deleted", "dead_lettered", "offloaded"}
    for prefix in ("", "first_message-", "outcome_with_completion-"):
        assert {p.stem for p in HISTORIES} >= {prefix + case for case in cases}
