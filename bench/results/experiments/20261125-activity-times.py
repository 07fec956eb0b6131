"""Where an A workflow's lifetime goes, early, midway and late in the last A run (not a benchmark).

Run right after ``bench/benchmark.py ... --skip-c`` (the next run empties the database). Takes the 40
workflows started first, the 40 around the middle and the 40 started last, and prints for each group the mean
lifetime and, per activity, the mean time from scheduled to started (waiting for a worker) and from started
to completed (held by the worker, and the server's answer to its completion).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections import defaultdict
from datetime import datetime

from temporalio.client import Client

from bench.processes import bench_ports

GROUP = 40


async def main(base: int) -> None:
    client = await Client.connect(f"127.0.0.1:{bench_ports(base).temporal}")
    rows: list[tuple[datetime, datetime, str]] = []
    async for execution in client.list_workflows("ExecutionStatus != 'Running'", page_size=1000):
        if execution.close_time is not None:
            rows.append((execution.start_time, execution.close_time, execution.id))
    if not rows:
        print("no closed workflows")
        return
    rows.sort()
    first_start = rows[0][0]
    middle = len(rows) // 2
    groups = {
        "first": rows[:GROUP],
        "middle": rows[middle - GROUP // 2 : middle + GROUP // 2],
        "last": rows[-GROUP:],
    }
    for label, group in groups.items():
        waiting: dict[str, list[float]] = defaultdict(list)
        held: dict[str, list[float]] = defaultdict(list)
        for _, _, workflow_id in group:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            scheduled: dict[int, tuple[str, float]] = {}
            started: dict[int, float] = {}
            for event in history.events:
                at = event.event_time.ToDatetime().timestamp()
                if event.HasField("activity_task_scheduled_event_attributes"):
                    name = event.activity_task_scheduled_event_attributes.activity_type.name
                    scheduled[event.event_id] = (name, at)
                elif event.HasField("activity_task_started_event_attributes"):
                    started[event.activity_task_started_event_attributes.scheduled_event_id] = at
                elif event.HasField("activity_task_completed_event_attributes"):
                    scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
                    name, scheduled_at = scheduled[scheduled_id]
                    waiting[name].append((started[scheduled_id] - scheduled_at) * 1000)
                    held[name].append((at - started[scheduled_id]) * 1000)
        began, ended = ((group[i][0] - first_start).total_seconds() for i in (0, -1))
        offsets = f"{began:.1f}-{ended:.1f} s"
        lifetime = statistics.mean((close - start).total_seconds() * 1000 for start, close, _ in group)
        print(f"{label}: started {offsets} after the first, lifetime {lifetime:.0f} ms")
        for name in held:
            print(
                f"  {name:24s} waiting {statistics.mean(waiting[name]):5.0f} ms"
                f"  held {statistics.mean(held[name]):5.0f} ms  ({len(held[name])})"
            )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 23000))
