"""Benchmark C, the orchestration limit: a workflow doing nothing but ``activities`` no-op activities.

Shaped like the deletion workflow's happy path: the first two activities run in parallel (check topic ∥ verify
metadata), the rest one after another, each on a task queue served by another process. Pure module: the
workflow sandbox re-imports it.
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
    async def run(self, activities: int, queue: str) -> int:
        def call(step: int) -> asyncio.Future[int]:
            return workflow.execute_activity(  # type: ignore[return-value]
                noop, step, task_queue=queue, start_to_close_timeout=timedelta(seconds=60)
            )

        done = 0
        if activities >= 2:
            await asyncio.gather(call(0), call(1))
            done = 2
        for step in range(done, activities):
            await call(step)
        return activities
