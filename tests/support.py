"""Support shared by the tests that run the service on the embedded stack: pools in this process, waiting
for results and acks, retrying an eventually true assertion, where a simulated cluster writes. Fixtures live
in tests/fixtures.py and the tiers' conftest files; functions and types tests use live here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from ledger_deletion.contracts import DeletionResult
from ledger_deletion.settings import Settings
from workers.pools import RunningPools, run_pools

if TYPE_CHECKING:
    from devstack.admin_emulator import AdminEmulator


@dataclass(frozen=True)
class ClusterStore:
    """Where a tier's simulated clusters write (the ``cluster_store`` fixture): a ZooKeeper client, an S3
    client, the offload bucket. ``keep`` leaves what a test wrote, for a private stack whose leftovers are
    evidence."""

    zk: Any
    s3: Any
    bucket: str
    keep: bool = False


@contextlib.contextmanager
def private_emulator(zookeeper: str, **options: Any) -> Iterator[AdminEmulator]:
    """An admin emulator of the test's own, on free ports (``options``: AdminEmulator's), once each of its
    brokers answers /health: its ZooKeeper session connects in the background."""
    from devstack.admin_emulator import AdminEmulator  # here: the tiers without a stack never need it

    token = options.get("token")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with AdminEmulator(zookeeper, port=0, owner_port=0, **options) as emulator:
        for base in emulator.urls:
            deadline = time.monotonic() + 10
            while httpx.get(f"{base}/health", headers=headers).status_code != 200:
                assert time.monotonic() < deadline, f"the emulator at {base} never became healthy"
                time.sleep(0.1)
        yield emulator


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


# How long a test waits for one deletion's result. A decision takes seconds, but the bound must also cover
# the run's retries at the tests' retry settings (up to 4 attempts), the in-use grace re-checks, and
# scripts/test's other xdist workers sharing two cores with the stack: 120 s, never reached by a passing test.
RESULT_TIMEOUT = 120.0


async def wait_for_result(
    client: Client, workflow_id: str, timeout: float = RESULT_TIMEOUT
) -> DeletionResult:
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
