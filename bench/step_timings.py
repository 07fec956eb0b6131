"""Where a workflow's time goes, read from its history: waiting for workers, and workers holding tasks.

    python bench/step_timings.py --address 127.0.0.1:23233 --task-queue ldb-<run>-a-workflow --sample 300

Every history event carries the server's time. For each sampled closed workflow on the task queue this
script adds up, in milliseconds:

* workflow tasks waiting to be handed out (scheduled → started),
* workflow tasks held (started → completed: the worker's turn, and the server taking the completion),
* activities waiting to be picked up (scheduled → started),
* activities running (started → completed or failed: the activity itself, and the server taking the result),

and prints their means, then how long each activity type waited, by type and task queue. A benchmark run
leaves its last phase's workflows on its stack (each phase starts on an empty database): run ``--skip-c``
to read A's, or a whole A+C run to read C's. This is how the ack worker's 8 slots were found
(docs/performance.md, change 20).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client  # noqa: E402

PHASES = ("workflow_task_wait", "workflow_task_held", "activity_wait", "activity_running", "whole")


@dataclass
class StepTimes:
    """Milliseconds one workflow spent in each phase, and how long each of its activities waited."""

    workflow_task_wait: float = 0.0
    workflow_task_held: float = 0.0
    activity_wait: float = 0.0
    activity_running: float = 0.0
    whole: float = 0.0
    workflow_tasks: int = 0
    activities: int = 0
    waits_by_activity: dict[str, list[float]] = field(default_factory=dict)


def _ms(event: HistoryEvent) -> float:
    return event.event_time.ToMicroseconds() / 1000


def step_times(events: Sequence[HistoryEvent]) -> StepTimes:
    """The phases of one history (events in order, as the server returns them)."""
    out = StepTimes()
    if not events:
        return out
    by_id = {event.event_id: event for event in events}
    for event in events:
        kind = event.WhichOneof("attributes")
        if kind == "workflow_task_started_event_attributes":
            scheduled = by_id[event.workflow_task_started_event_attributes.scheduled_event_id]
            out.workflow_task_wait += _ms(event) - _ms(scheduled)
            out.workflow_tasks += 1
        elif kind == "workflow_task_completed_event_attributes":
            started = by_id[event.workflow_task_completed_event_attributes.started_event_id]
            out.workflow_task_held += _ms(event) - _ms(started)
        elif kind == "activity_task_started_event_attributes":
            scheduled = by_id[event.activity_task_started_event_attributes.scheduled_event_id]
            wait = _ms(event) - _ms(scheduled)
            out.activity_wait += wait
            out.activities += 1
            attrs = scheduled.activity_task_scheduled_event_attributes
            key = f"{attrs.activity_type.name} on {attrs.task_queue.name}"
            out.waits_by_activity.setdefault(key, []).append(wait)
        elif kind in ("activity_task_completed_event_attributes", "activity_task_failed_event_attributes"):
            started_id = getattr(event, kind).started_event_id
            out.activity_running += _ms(event) - _ms(by_id[started_id])
    out.whole = _ms(events[-1]) - _ms(events[0])
    return out


def summarize(times: Iterable[StepTimes]) -> list[str]:
    """Means per workflow by phase, then mean waits by activity type and queue."""
    rows = list(times)
    if not rows:
        return ["no closed workflows"]
    lines = [f"{len(rows)} workflows, ms per workflow (mean)"]
    for phase in PHASES:
        lines.append(f"  {phase:<20} {statistics.mean(getattr(r, phase) for r in rows):8.1f}")
    tasks = statistics.mean(r.workflow_tasks for r in rows)
    activities = statistics.mean(r.activities for r in rows)
    lines.append(f"  workflow tasks {tasks:.1f}, activities {activities:.1f} per workflow")
    waits: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for key, values in row.waits_by_activity.items():
            waits[key].extend(values)
    lines.append("ms an activity waited to be picked up (mean, median)")
    for key, values in sorted(waits.items()):
        mean, median = statistics.mean(values), statistics.median(values)
        lines.append(f"  {key:<60} {mean:7.1f} {median:7.1f}  n={len(values)}")
    return lines


async def sample(address: str, task_queue: str, size: int) -> list[StepTimes]:
    client = await Client.connect(address)
    query = f'TaskQueue = "{task_queue}" AND ExecutionStatus != "Running"'
    ids = [wf.id async for wf in client.list_workflows(query, page_size=1000)]
    chosen = random.Random(0).sample(ids, min(size, len(ids)))
    out = []
    for workflow_id in chosen:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        out.append(step_times(list(history.events)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--address", default="127.0.0.1:23233", help="Temporal frontend (the benchmark's stack)"
    )
    parser.add_argument(
        "--task-queue", required=True, help="the workflows' task queue, e.g. ldb-<run>-a-workflow"
    )
    parser.add_argument("--sample", type=int, default=300, help="closed workflows to read")
    args = parser.parse_args()
    print("\n".join(summarize(asyncio.run(sample(args.address, args.task_queue, args.sample)))))


if __name__ == "__main__":
    main()
