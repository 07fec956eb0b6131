"""Worker process of benchmark C: ``--role workflow`` runs TrivialWorkflow, ``--role activity`` the no-op,
``--role both`` both on one task queue (the counterpart of colocated pools).

    python bench/orchestration_limit.py --address 127.0.0.1:7233 --queue q --role workflow

Same worker settings as the deletion service's pools (workflows outside the SDK's sandbox unless
``--sandbox``, sync activities on a thread pool of the pool's concurrency, the pools' pollers, which the
benchmark passes in ``--pollers``), so the difference between A and C is what the deletion itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client  # noqa: E402
from temporalio.worker import (  # noqa: E402
    PollerBehavior,
    PollerBehaviorAutoscaling,
    PollerBehaviorSimpleMaximum,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner  # noqa: E402

from bench.trivial import TrivialWorkflow, noop  # noqa: E402


async def serve(address: str, queue: str, role: str, concurrency: int, pollers: str, sandbox: bool) -> None:
    behavior: PollerBehavior = (
        PollerBehaviorAutoscaling() if pollers == "autoscale" else PollerBehaviorSimpleMaximum(int(pollers))
    )
    runner: WorkflowRunner = SandboxedWorkflowRunner() if sandbox else UnsandboxedWorkflowRunner()
    client = await Client.connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if role == "workflow":
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[TrivialWorkflow],
            workflow_runner=runner,
            max_concurrent_workflow_tasks=concurrency,
            workflow_task_poller_behavior=behavior,
        )
    elif role == "both":  # as the colocated pools: activities on the workflow's queue, started eagerly
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[TrivialWorkflow],
            workflow_runner=runner,
            activities=[noop],
            activity_executor=ThreadPoolExecutor(concurrency),
            max_concurrent_workflow_tasks=concurrency,
            max_concurrent_activities=concurrency,
            workflow_task_poller_behavior=behavior,
            activity_task_poller_behavior=behavior,
        )
    else:
        worker = Worker(
            client,
            task_queue=f"{queue}-activities",
            activities=[noop],
            activity_executor=ThreadPoolExecutor(concurrency),
            max_concurrent_activities=concurrency,
            activity_task_poller_behavior=behavior,
        )
    async with worker:
        print(f"trivial {role} worker running", flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--role", choices=("workflow", "activity", "both"), required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--pollers",
        required=True,
        help="a fixed number of pollers (the benchmark passes the pools' setting), or autoscale",
    )
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run the workflow in the SDK's sandbox (as the pools do with LEDGER_DELETION_WORKFLOW_SANDBOX)",
    )
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.queue, args.role, args.concurrency, args.pollers, args.sandbox))


if __name__ == "__main__":
    main()
