"""Support shared by the tests that run the service on the embedded stack: pools in this process, waiting
for results and acks, retrying an eventually true assertion. Fixtures live in the conftest files; functions
tests call live here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from ledger_deletion.contracts import DeletionResult
from ledger_deletion.settings import Settings
from workers.pools import RunningPools, run_pools


@contextlib.asynccontextmanager
async def running_pools(
    settings: Settings, client: Client, pools: tuple[str, ...] = ("all",)
) -> AsyncIterator[RunningPools]:
    stop = asyncio.Event()
    started: asyncio.Future[RunningPools] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_pools(pools, settings, stop, client=client, started=started))
    done, _ = await asyncio.wait([started, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises the start-up error
    try:
        yield started.result()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)


async def wait_until_all_acked(running: RunningPools, timeout: float = 30) -> None:
    """Until the process holds no received-but-unacked message; fails after ``timeout`` seconds."""
    assert running.ingestor is not None
    deadline = time.monotonic() + timeout
    while len(running.ingestor.pending) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert len(running.ingestor.pending) == 0, f"{len(running.ingestor.pending)} message(s) never acked"


async def wait_for_result(client: Client, workflow_id: str, timeout: float = 90) -> DeletionResult:
    """The result of the (latest run of the) workflow, waiting for it to be started by the ingest loop."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            handle = client.get_workflow_handle(workflow_id, result_type=DeletionResult)
            return await asyncio.wait_for(
                handle.result(), timeout=max(1.0, deadline - asyncio.get_running_loop().time())
            )
        except RPCError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.3)
        except WorkflowFailureError:
            raise


async def eventually(check: object, timeout: float = 20.0) -> None:
    """Retry an assertion (visibility and metrics are eventually consistent)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()  # type: ignore[operator]
            if asyncio.iscoroutine(result):
                await result
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
