"""The periodic reconcile as a Temporal Schedule the watcher keeps: created, updated without losing an
operator's pause, and each run executes the configured command on a watcher process."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from typing import Any

import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleSpec, WorkflowFailureError

from devstack.stack import StackEndpoints
from ledger_deletion.watch_contracts import ReconcileRunResult
from tests.integration.watch_support import corner, until, watching
from workers.reconcile_schedule import schedule_id
from workflows.reconcile import WORKFLOW_NAME

pytestmark = pytest.mark.stack


def at(spec: ScheduleSpec) -> tuple[int, int]:
    """(hour, minute) of a daily schedule (the server keeps a cron expression as a calendar spec)."""
    [calendar] = spec.calendars
    return calendar.hour[0].start, calendar.minute[0].start


async def triggered_run(client: Client, schedule: str, runs_before: int, timeout: float = 60) -> str:
    """Trigger the schedule now; the id of the workflow the trigger started."""
    handle = client.get_schedule_handle(schedule)
    await handle.trigger()
    deadline = time.monotonic() + timeout
    while True:
        actions = (await handle.describe()).info.recent_actions
        if len(actions) > runs_before:
            started = actions[-1].action
            return str(getattr(started, "workflow_id"))  # noqa: B009 - ScheduleActionExecution's subclass
        assert time.monotonic() < deadline, "the triggered run did not start"
        await asyncio.sleep(0.3)


async def test_the_reconcile_schedule_runs_its_command_and_keeps_a_pause(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    command = shlex.join([sys.executable, "-c", "import sys; print('reconciled'); sys.exit(0)"])
    with corner(stack, s3, new_ledger_id, reconcile_schedule="0 3 * * *", reconcile_command=command) as c:
        schedule = schedule_id(c.settings)
        handle = temporal_client.get_schedule_handle(schedule)
        try:
            async with watching(c.settings, temporal_client) as watcher:
                await until(lambda: watcher.stats.resyncs >= 1, 30, "the watcher's start")
                described = await handle.describe()
                action = described.schedule.action
                assert isinstance(action, ScheduleActionStartWorkflow)
                assert action.workflow == WORKFLOW_NAME and action.task_queue == c.settings.watch_task_queue
                assert at(described.schedule.spec) == (3, 0)
                run = await triggered_run(temporal_client, schedule, 0)
                result = await temporal_client.get_workflow_handle(
                    run, result_type=ReconcileRunResult
                ).result()
                assert result.exit_code == 0 and "reconciled" in result.output_tail
                await handle.pause(note="paused by the test")

            # A watcher started with other settings updates the schedule, and leaves the pause alone.
            failing = shlex.join([sys.executable, "-c", "import sys; print('refused'); sys.exit(3)"])
            settings = c.settings.with_overrides(reconcile_schedule="30 4 * * *", reconcile_command=failing)
            async with watching(settings, temporal_client) as watcher:
                await until(lambda: watcher.stats.resyncs >= 1, 30, "the watcher's start")
                described = await handle.describe()
                assert (
                    described.schedule.state.paused and described.schedule.state.note == "paused by the test"
                )
                assert at(described.schedule.spec) == (4, 30)
                run = await triggered_run(temporal_client, schedule, 1)
                with pytest.raises(WorkflowFailureError) as failed:
                    await temporal_client.get_workflow_handle(run).result()
                assert "exited with 3" in str(failed.value.cause) and "refused" in str(failed.value.cause)
        finally:
            await handle.delete()
