"""Count the activity attempts the server timed out in the benchmark stack's last A run (not a benchmark).

Run right after ``bench/benchmark.py ... --skip-c`` (the next run empties the database): for every closed
workflow, every activity whose started event records attempt > 1 after a start-to-close timeout, with the
time from the first scheduling to the attempt that ran, and the workflow's own duration.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client

from bench.processes import bench_ports


async def main(base: int) -> None:
    client = await Client.connect(f"127.0.0.1:{bench_ports(base).temporal}")
    by_step: Counter[str] = Counter()
    waits: list[float] = []
    durations: list[float] = []
    async for execution in client.list_workflows("ExecutionStatus != 'Running'"):
        if execution.close_time is not None:
            durations.append((execution.close_time - execution.start_time).total_seconds())
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        scheduled = {
            e.event_id: e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
        }
        for event in history.events:
            started = event.activity_task_started_event_attributes
            if not event.HasField("activity_task_started_event_attributes") or started.attempt < 2:
                continue
            timeout = started.last_failure.timeout_failure_info.timeout_type
            if timeout != TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE:
                continue
            first = scheduled[started.scheduled_event_id]
            by_step[first.activity_task_scheduled_event_attributes.activity_type.name] += 1
            waits.append((event.event_time.ToDatetime() - first.event_time.ToDatetime()).total_seconds())
    durations.sort()
    print(f"workflows {len(durations)}, longest {durations[-1]:.1f} s" if durations else "no workflows")
    print(f"attempts retried after a start-to-close timeout: {sum(by_step.values())} {dict(by_step)}")
    if waits:
        print(f"first scheduled -> retried attempt started: {min(waits):.1f}-{max(waits):.1f} s")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 23000))
