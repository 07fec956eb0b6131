"""What a deletion costs in Temporal, counted from its workflow histories after the run.

These counts do not depend on the machine or its load: the same code and the same mix give the same numbers
anywhere (timing shows only where a run had to retry or wait twice). Per history:

* events, workflow tasks (``WorkflowTaskStarted``, and how many of them timed out), activity tasks
  (``ActivityTaskScheduled``) and their retries (``ActivityTaskStarted.attempt`` − 1: intermediate attempts
  leave no event of their own), markers (``MarkerRecorded``: local activities and version markers), timers,
  signals, search-attribute upserts;
* state transitions and history bytes, as the server counts them (``DescribeWorkflowExecution``);
* Temporal Cloud actions, estimated from the events as Temporal's "Temporal Cloud Actions" page maps them: the
  start, each activity scheduled and each retry, every timer, signal and upsert, and the markers of one
  workflow task as one action (with the local-activity retries the task's metering metadata reports).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

# The SDK's own search attribute for versioning: its upserts are not billed (Cloud Actions, Workflow).
_CHANGE_VERSION = "TemporalChangeVersion"


@dataclass
class Counts:
    """What workflow runs cost, summed over the runs counted."""

    runs: int = 0
    events: int = 0
    workflow_tasks: int = 0
    workflow_task_timeouts: int = 0  # a worker too busy to answer in time: a sign of an overloaded machine
    activity_tasks: int = 0
    activity_retries: int = 0
    markers: int = 0
    timers: int = 0
    signals: int = 0
    upserts: int = 0
    actions: int = 0
    transitions: int = 0
    history_bytes: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        )

    def per(self, items: int) -> dict[str, float]:
        """Every count divided by ``items`` (ledgers, messages), as the table shows it."""
        return {f.name: getattr(self, f.name) / items if items else 0.0 for f in dataclasses.fields(self)}


def count_history(events: Sequence[HistoryEvent], transitions: int = 0, history_bytes: int = 0) -> Counts:
    """The counts of one run's history (events in order, as the server returns them)."""
    out = Counts(runs=1, events=len(events), transitions=transitions, history_bytes=history_bytes)
    tasks_with_markers: set[int] = set()
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out.actions += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            out.workflow_tasks += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            out.workflow_task_timeouts += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            metering = event.workflow_task_completed_event_attributes.metering_metadata
            out.actions += metering.nonfirst_local_activity_execution_attempts
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            out.activity_tasks += 1
            out.actions += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            retries = max(0, event.activity_task_started_event_attributes.attempt - 1)
            out.activity_retries += retries
            out.actions += retries
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            out.markers += 1
            tasks_with_markers.add(event.marker_recorded_event_attributes.workflow_task_completed_event_id)
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            out.timers += 1
            out.actions += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            out.signals += 1
            out.actions += 1
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            out.upserts += 1
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            out.actions += int(set(fields) != {_CHANGE_VERSION})
    out.actions += len(tasks_with_markers)
    return out


async def fetch_counts(
    client: Client, runs: Iterable[tuple[str, str]], concurrency: int = 16
) -> dict[tuple[str, str], Counts]:
    """The counts of every (workflow id, run id), read from the server once the runs closed."""
    slots = asyncio.Semaphore(concurrency)

    async def one(workflow_id: str, run_id: str) -> tuple[tuple[str, str], Counts]:
        async with slots:
            handle = client.get_workflow_handle(workflow_id, run_id=run_id)
            history = await handle.fetch_history()
            info = (await handle.describe()).raw_description.workflow_execution_info
        counts = count_history(list(history.events), info.state_transition_count, info.history_size_bytes)
        return (workflow_id, run_id), counts

    return dict(await asyncio.gather(*(one(w, r) for w, r in runs)))
