"""Session fixtures: one embedded stack per test session, shared by every test that needs it.

The stack is the one ``ledger-deletion stack up`` runs (real Temporal dev server, pulsar-lite, ZooKeeper, moto
S3, admin emulator). Each session uses its own deletion topic and task queues, and every test its own ledger
ids, so sessions and tests never see each other's messages or ledgers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from devstack.stack import Stack, StackEndpoints
from devstack.stack import default_state_dir as _default_state_dir
from ledger_deletion.contracts import DeletionResult
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from workers.pools import RunningPools, run_pools


@pytest.fixture(scope="session")
def stack() -> StackEndpoints:
    state_dir = Path(os.environ.get("LEDGER_DELETION_STACK_DIR", _default_state_dir()))
    endpoints = Stack(state_dir).up()
    # boto3 inside the service reads credentials from the standard chain: point it at moto's dummy ones.
    for name, value in endpoints.as_env().items():
        if name.startswith("AWS_"):
            os.environ.setdefault(name, value)
    return endpoints


@pytest.fixture(scope="session")
def session_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def settings(stack: StackEndpoints, session_id: str) -> Settings:
    return stack.settings(
        topic=f"persistent://pulsar/system/__ledger_deletion_test_{session_id}",
        task_queue_prefix=f"ld-test-{session_id}",
        max_attempts=4,
        retry_initial_seconds=0.2,
        retry_max_interval_seconds=1.0,
        activity_timeout_seconds=20,
        in_use_rechecks=2,
        in_use_recheck_seconds=1.5,
        ack_schedule_to_start_seconds=10,
        # pulsar-lite can stop feeding a consumer part-way through a big backlog: a fresh one soon takes over.
        ingest_resubscribe_idle_seconds=3,
        shutdown_grace_seconds=2,
    )


@pytest.fixture(scope="session")
async def temporal_client(stack: StackEndpoints) -> Client:
    return await Client.connect(stack.temporal_address)


@pytest.fixture(scope="session")
async def service(settings: Settings, temporal_client: Client) -> AsyncIterator[RunningPools]:
    """All four pools running in this process against the session's topic and task queues."""
    async with running_pools(settings, temporal_client) as running:
        yield running


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


@pytest.fixture(scope="session")
def publisher(settings: Settings) -> Iterator[RequestPublisher]:
    with RequestPublisher(settings) as publisher:
        yield publisher


@pytest.fixture(scope="session")
def zk(stack: StackEndpoints) -> Iterator[Any]:
    client = stack.zookeeper_client()
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def s3(stack: StackEndpoints) -> Any:
    return stack.s3_client()


_ids = itertools.count(random.randrange(10**6, 2**31 - 10**8, 1000))
_long_ids = itertools.count(2**32 + random.randrange(0, 2**40, 1000))


@pytest.fixture
def new_ledger_id() -> Any:
    """Allocator of ledger ids nobody else in this session uses (``long=True``: ≥ 2^32, long znode path)."""

    def allocate(long: bool = False) -> int:
        return next(_long_ids) if long else next(_ids)

    return allocate


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
