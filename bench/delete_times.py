"""When each delete was handed to a deleting pool, read from the workflow histories after a run.

The delete rate limits (``LEDGER_DELETION_BK_DELETES_PER_SECOND``, ``..._OFFLOAD_DELETES_PER_SECOND``) are
Temporal task-queue rate limits: the matching service holds a delete activity's task until the limit allows
it to be dispatched. ``ActivityTaskStarted``'s time is that dispatch (the server writes the event when the
activity closes, with the time it started), so these are the times the limit governs. The audit log's
``deleted_at`` is workflow time, the start of the workflow task that saw the result: many deletes share one,
which would make a burst where none was.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from ledger_deletion.contracts import Step

# The destructive activities, by the pool (task queue) whose rate limit bounds them.
DELETE_STEPS = {Step.DELETE_BK_LEDGER.value: "bookkeeper", Step.DELETE_OFFLOAD_SEGMENT.value: "offload"}


def delete_starts(events: Sequence[HistoryEvent]) -> list[tuple[str, float]]:
    """(pool, epoch seconds) of each delete activity's start in one run's history."""
    scheduled: dict[int, str] = {}
    out = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            if name in DELETE_STEPS:
                scheduled[event.event_id] = DELETE_STEPS[name]
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            pool = scheduled.get(event.activity_task_started_event_attributes.scheduled_event_id)
            if pool:
                out.append((pool, event.event_time.seconds + event.event_time.nanos / 1e9))
    return out


async def fetch_delete_starts(
    client: Client, runs: Iterable[tuple[str, str]], concurrency: int = 16
) -> dict[str, list[float]]:
    """Every (workflow id, run id)'s delete starts, by pool."""
    gate = asyncio.Semaphore(concurrency)
    out: dict[str, list[float]] = defaultdict(list)

    async def one(workflow_id: str, run_id: str) -> None:
        async with gate:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        for pool, at in delete_starts(history.events):
            out[pool].append(at)

    await asyncio.gather(*(one(w, r) for w, r in runs))
    return dict(out)


def peak_rate(times: Iterable[float], window: float) -> float:
    """The most events in any ``window`` seconds (a sliding window ending at an event), per second."""
    ordered = sorted(times)
    best, low = 0, 0
    for high, t in enumerate(ordered):
        while ordered[low] <= t - window:
            low += 1
        best = max(best, high - low + 1)
    return best / window
