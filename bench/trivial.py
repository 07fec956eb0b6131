"""Benchmark C, the orchestration limit: a workflow doing nothing but ``activities`` no-op activities.

Shaped like a deletion workflow: the first ``first_round`` activities run in parallel (check topic ∥ verify
metadata), the rest one after another, each on a task queue served by another process. The benchmark
passes the shapes it read from A's histories, so C runs the same activities in the same rounds, with the
timeouts A scheduled them with (an activity's timeout timer is work for the server: in a run longer than
the timeout it fires, as A's 30 s ones do). The last activity runs on ``last_queue``, the starter's own
queue, as A's ack runs in the process that received the message and started the run: that is how the
starter learns a workflow is done, instead of a long poll for its result that A never makes. Pure module:
with ``--sandbox`` the workflow sandbox re-imports it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import activity, workflow

TRIVIAL_WORKFLOW = "TrivialWorkflow"
DEFAULT_TIMEOUT_SECONDS = 60.0


@dataclass
class TrivialInput:
    activities: int
    queue: str
    first_round: int = 2
    # Per activity, in the order A scheduled them: [start-to-close, schedule-to-start] in seconds, 0 for
    # none. An activity past the end of the list gets 60 s and none.
    timeouts: list[list[float]] = field(default_factory=list)
    last_queue: str = ""  # the last activity's task queue; "" for ``queue``


@activity.defn(name="noop")
def noop(step: int) -> int:
    return step


@workflow.defn(name=TRIVIAL_WORKFLOW)
class TrivialWorkflow:
    @workflow.run
    async def run(self, shape: TrivialInput) -> int:
        def call(step: int) -> asyncio.Future[int]:
            start_to_close, schedule_to_start = (
                shape.timeouts[step] if step < len(shape.timeouts) else [DEFAULT_TIMEOUT_SECONDS, 0.0]
            )
            last = step == shape.activities - 1
            return workflow.execute_activity(  # type: ignore[return-value]
                noop,
                step,
                task_queue=shape.last_queue if last and shape.last_queue else shape.queue,
                start_to_close_timeout=timedelta(seconds=start_to_close),
                schedule_to_start_timeout=timedelta(seconds=schedule_to_start) if schedule_to_start else None,
            )

        done = min(max(shape.first_round, 1), shape.activities)
        await asyncio.gather(*(call(step) for step in range(done)))
        for step in range(done, shape.activities):
            await call(step)
        return shape.activities
