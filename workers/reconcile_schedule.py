"""The periodic reconcile as a Temporal Schedule, kept by the watcher processes.

Every watcher process brings the schedule to its settings when it starts (``LEDGER_DELETION_RECONCILE_*``):
created when missing, its spec and action updated when present. Its state (paused or not, and the note an
operator left when pausing it in the UI) is not touched: a pause stays until someone lifts it.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from ledger_deletion.settings import Settings
from ledger_deletion.watch_contracts import ReconcileRunInput
from workflows.reconcile import ReconcileWorkflow

log = logging.getLogger(__name__)


def schedule_id(settings: Settings) -> str:
    return f"{settings.task_queue_prefix}-reconcile"


def reconcile_schedule(settings: Settings) -> Schedule:
    """The schedule the settings describe: the reconcile command on the cron spec, one run at a time."""
    action = ScheduleActionStartWorkflow(
        ReconcileWorkflow.run,
        ReconcileRunInput(
            argv=shlex.split(settings.reconcile_command),
            timeout_seconds=settings.reconcile_timeout_seconds,
        ),
        id=f"{schedule_id(settings)}-run",  # the server appends the scheduled time
        task_queue=settings.watch_task_queue,
        # Room for the activity's own timeout, then the workflow gives up too.
        execution_timeout=timedelta(seconds=settings.reconcile_timeout_seconds + 600),
    )
    return Schedule(
        action=action,
        spec=ScheduleSpec(cron_expressions=[settings.reconcile_schedule]),
        # A run still going when the next is due: the next is skipped (two scans at once only cost twice).
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_reconcile_schedule(client: Client, settings: Settings) -> str:
    """Create the schedule or update its spec and action; returns "created" or "updated"."""
    wanted = reconcile_schedule(settings)
    try:
        await client.create_schedule(schedule_id(settings), wanted)
        log.info("reconcile schedule %s created: %s", schedule_id(settings), settings.reconcile_schedule)
        return "created"
    except ScheduleAlreadyRunningError:
        pass

    def update(current: ScheduleUpdateInput) -> ScheduleUpdate:
        schedule = current.description.schedule
        return ScheduleUpdate(
            schedule=dataclasses.replace(
                schedule, action=wanted.action, spec=wanted.spec, policy=wanted.policy
            )
        )

    await client.get_schedule_handle(schedule_id(settings)).update(update)
    log.info("reconcile schedule %s updated: %s", schedule_id(settings), settings.reconcile_schedule)
    return "updated"
