"""Support of the fault tests: per-test settings that reach S3 through the fault proxy, pool processes,
and one batch under one fault, then every promise of the service checked from outside.

The promises: a referenced or mismatching ledger is never deleted; every eligible ledger is
deleted; every request ends acked or dead-lettered; no workflow is left running; nothing crashes on input.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from devstack.broker_state import EmulatorControl
from devstack.cluster import SimulatedCluster
from devstack.faults import PoolSet, S3FaultProxy, count_redeliverable, read_dead_letters
from devstack.soak import (
    PEER_ROOT,
    Batch,
    build_batch,
    peer_store,
    publish_batch,
    replay_kept,
    run_marks,
    settle,
    wait_quiet,
)
from devstack.stack import DUMMY_AWS_CREDENTIALS, S3_REGION, Stack, StackEndpoints
from ledger_deletion.contracts import DeletionResult, DeletionStatus
from ledger_deletion.settings import POOLS, Settings
from ledger_deletion.submit import RequestPublisher
from workflows.ledger_deletion import STATUS_QUERY

# "No workflow stuck": every workflow of a batch must close within this many seconds of publishing, faults
# included. Generous for a loaded 2-core CI machine; a stuck workflow never closes at all.
CLOSE_BOUND_SECONDS = 150.0


@dataclass
class Report:
    batch: Batch
    results: dict[str, DeletionResult]
    unexpected: dict[str, str]
    still_running: list[str]
    storage_problems: list[str]
    seconds: float
    unacked: int | None = None  # measured by finish(), once no pool consumes any more
    dead_letters: list[Any] = field(default_factory=list)

    async def finish(self, settings: Settings) -> Report:
        """Measure acks and dead letters from outside. Call after the pools stopped consuming."""
        self.unacked = await asyncio.to_thread(count_redeliverable, settings, 3.0)
        self.dead_letters = await asyncio.to_thread(
            read_dead_letters, settings, 1.0, len(self.batch.garbage), 30.0
        )
        return self

    def assert_promises(self) -> None:
        assert self.unacked is not None, "finish() first"
        assert self.unexpected == {}, self.unexpected
        assert self.storage_problems == [], self.storage_problems
        assert self.still_running == [], f"workflows still running: {self.still_running}"
        assert self.unacked == 0, f"{self.unacked} message(s) never acked"
        letters = {m.data() for m in self.dead_letters}
        missing = [g for g in self.batch.garbage if g not in letters]
        assert missing == [], f"{len(missing)} undecodable payload(s) not in the DLQ"
        assert all(m.properties().get("ledger-deletion.reason") for m in self.dead_letters)
        assert self.seconds < CLOSE_BOUND_SECONDS, f"batch took {self.seconds:.0f} s"


async def run_batch(
    client: Client,
    settings: Settings,
    cluster: SimulatedCluster,
    fault: Callable[[], Coroutine[Any, Any, Any]] | None = None,
    *,
    units: int = 2,
    seed: int = 0,
    marked: asyncio.Event | None = None,
    control: EmulatorControl | None = None,
    diverge: bool = False,
    before_publish: Callable[[Batch], None] | None = None,
) -> Report:
    """Build a batch, publish it with ``fault`` running alongside, and wait until every workflow closed and
    storage can be checked. Acks and dead letters are measured by :meth:`Report.finish` afterwards.

    With ``diverge`` (and the admin emulator's ``control``) the batch holds trims whose store write fails,
    applied as the requests are sent; their requests are kept for replay, then replayed once the owner's
    next store write lands (``replay_kept``), and must delete. ``before_publish`` sees the built batch."""
    rng = random.Random(seed)
    # The other Pulsar cluster on the same BookKeeper (declared in the fault settings): none of its ledgers
    # may go, whatever the fault.
    peer = SimulatedCluster(cluster.zk, cluster.s3, bucket=cluster.bucket, metadata_root=PEER_ROOT)
    batch = await asyncio.to_thread(
        functools.partial(
            build_batch, cluster, f"fault/{uuid.uuid4().hex[:8]}", rng, units, diverge=diverge, peer=peer
        )
    )
    if before_publish is not None:
        await asyncio.to_thread(before_publish, batch)
    began = time.monotonic()
    fault_task = asyncio.create_task(fault()) if fault is not None else None
    with RequestPublisher(settings) as publisher:
        await asyncio.to_thread(publish_batch, batch, publisher, rng)
    if diverge:
        assert control is not None, "a divergence is set through the admin emulator's control"
        await asyncio.to_thread(batch.apply_divergences, control)
    await run_marks(batch, time.monotonic())
    if marked is not None:
        marked.set()  # the mark phase's metadata updates have all landed
    if fault_task is not None:
        await fault_task
    results, unexpected = await settle(client, batch, timeout=CLOSE_BOUND_SECONDS)
    if diverge:
        assert control is not None
        lost = await asyncio.to_thread(batch.replay_kept_lost)
        assert lost == 0, f"{lost} ledger(s) or object(s) kept for replay were deleted"
        unexpected |= await replay_kept(client, settings, batch, control, timeout=CLOSE_BOUND_SECONDS)
    # Redelivered copies may start late runs (ALREADY_DELETED): wait until nothing runs any more.
    still = await wait_quiet(client, settings, timeout=60, quiet=2.0)
    seconds = time.monotonic() - began
    _, _, problems = await asyncio.to_thread(batch.storage_report)
    return Report(batch, results, unexpected, still, problems, seconds)


def make_fault_settings(endpoints: StackEndpoints, proxy: S3FaultProxy) -> Settings:
    """A fresh topic and task queues; the service reaches S3 through the fault proxy."""
    run = uuid.uuid4().hex[:8]
    proxy.heal()
    proxy.come_back()
    return endpoints.settings(
        s3_endpoint=proxy.url,
        # The offload driver metadata the cluster writes names moto itself: the proxy is the same store.
        s3_endpoint_aliases=endpoints.s3_endpoint,
        topic=f"persistent://pulsar/system/__ledger_deletion_fault_{run}",
        task_queue_prefix=f"ld-fault-{run}",
        # Retries outlast every fault these tests inject (≤ ~15 s): a transient fault must end in deletion,
        # never in the dead-letter topic.
        max_attempts=12,
        retry_initial_seconds=0.3,
        retry_max_interval_seconds=3.0,
        activity_timeout_seconds=20,
        zookeeper_timeout_seconds=5,
        in_use_rechecks=3,
        in_use_recheck_seconds=1.5,
        ack_schedule_to_start_seconds=4,
        # pulsar-lite can stop feeding a consumer part-way through a big backlog: a fresh one soon takes over.
        ingest_resubscribe_idle_seconds=3,
        shutdown_grace_seconds=2,
        # A second Pulsar cluster shares the BookKeeper in every batch (run_batch's peer), its store declared.
        bookkeeper_shared_with=peer_store(endpoints.zookeeper),
    )


@contextlib.asynccontextmanager
async def started_pools(
    settings: Settings, fault_stack: Stack, pools: tuple[str, ...] = POOLS, log_name: str = ""
) -> AsyncIterator[PoolSet]:
    """Pool processes (killable with SIGKILL) on ``settings``' topic and queues, stopped on exit."""
    pool_set = PoolSet(
        settings,
        fault_stack.state_dir / "logs" / (log_name or settings.task_queue_prefix),
        pools=pools,
        extra_env={**DUMMY_AWS_CREDENTIALS, "AWS_DEFAULT_REGION": S3_REGION},
    )
    await asyncio.to_thread(pool_set.start)
    try:
        yield pool_set
    finally:
        await asyncio.to_thread(pool_set.stop)


async def started_run_ids(client: Client, workflow_ids: Iterable[str], timeout: float = 60) -> list[str]:
    """The run id of each workflow once the ingest loop has started it (``describe`` finds it); fails after
    ``timeout`` seconds for all of them."""
    deadline = time.monotonic() + timeout
    run_ids = []
    for workflow_id in workflow_ids:
        while True:
            try:
                run_ids.append((await client.get_workflow_handle(workflow_id).describe()).run_id)
                break
            except Exception:
                assert time.monotonic() < deadline, f"{workflow_id} never started"
                await asyncio.sleep(0.2)
    return run_ids


async def messages_joined(
    client: Client, workflow_ids: Iterable[str], count: int, timeout: float = 60
) -> None:
    """Until each running workflow holds ``count`` message references (its status query says so); fails
    after ``timeout`` seconds for all of them."""
    deadline = time.monotonic() + timeout
    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        while True:
            status = await handle.query(STATUS_QUERY, result_type=DeletionStatus)
            if status.messages_collected >= count:
                break
            assert time.monotonic() < deadline, (
                f"{workflow_id} holds {status.messages_collected} message(s), not {count}"
            )
            await asyncio.sleep(0.2)
