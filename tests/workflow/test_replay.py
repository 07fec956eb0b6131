"""Recorded histories must replay against the current workflow code (catches non-deterministic edits).

``histories/`` holds one history per shape of run (``record_histories.SHAPES``), recorded from real runs on
Temporal's dev server by ``python -m tests.workflow.record_histories``, the one way to record them.

The versioning rule (also in ``workflows/ledger_deletion.py``): a run replays its history on whatever code
the worker has, so a workflow change that makes this test fail would break the runs open when it rolls out.

* Before 1.0 no run exists outside development: a workflow change re-records the histories
  (``python -m tests.workflow.record_histories``) and commits them with the change.
* From the first release on, every workflow change is versioned (``workflow.patched("<id>")`` keeping the
  old path, a new input field with a default, or a new workflow type) and gets a history of its own,
  recorded next to the old ones, which keep replaying: runs of the old shape may still be open.

Each history replays twice: outside the sandbox, as the service runs workflows, and in the SDK's sandbox,
which also fails on a restricted call (clock, random, I/O) in the workflow code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from ledger_deletion.settings import Settings
from tests.workflow.record_histories import HISTORIES as HISTORY_DIR
from tests.workflow.record_histories import SHAPES
from workers.pools import workflow_runner
from workflows.ledger_deletion import LedgerDeletionWorkflow

HISTORIES = sorted(HISTORY_DIR.glob("*.json"))

RUNNERS = {"unsandboxed": Settings(), "sandboxed": Settings(workflow_sandbox=True)}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path, runner: str) -> None:
    history = WorkflowHistory.from_json(f"recorded-{path.stem}", path.read_text())
    replayer = Replayer(workflows=[LedgerDeletionWorkflow], workflow_runner=workflow_runner(RUNNERS[runner]))
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


def test_every_shape_has_exactly_one_history() -> None:
    """A shape the recorder knows but nobody recorded, or a history no shape accounts for, fails."""
    assert sorted(p.stem for p in HISTORIES) == sorted(SHAPES)
