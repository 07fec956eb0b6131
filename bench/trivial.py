"""Benchmark C, the orchestration limit: a workflow doing nothing but ``activities`` no-op activities.

Shaped like a deletion workflow: the first ``first_round`` activities run in parallel (check topic ∥ verify
metadata), the rest one after another, each on a task queue served by another process. The benchmark
passes the shapes it read from A's histories, so C runs the same activities in the same rounds. Pure
module: with ``--sandbox`` the workflow sandbox re-imports it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

TRIVIAL_WORKFLOW = "TrivialWorkflow"


@activity.defn(name="noop")
def noop(step: int) -> int:
    return step


@workflow.defn(name=TRIVIAL_WORKFLOW)
class TrivialWorkflow:
    @workflow.run
    async def run(self, activities: int, queue: str, first_round: int = 2) -> int:
        def call(step: int) -> asyncio.Future[int]:
            return workflow.execute_activity(  # type: ignore[return-value]
                noop, step, task_queue=queue, start_to_close_timeout=timedelta(seconds=60)
            )

        done = min(max(first_round, 1), activities)
        await asyncio.gather(*(call(step) for step in range(done)))
        for step in range(done, activities):
            await call(step)
        return activities
