"""Helpers of the fault tests: per-test settings that reach S3 through the fault proxy, pool processes."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from devstack.faults import PoolSet, S3FaultProxy
from devstack.soak import peer_store
from devstack.stack import DUMMY_AWS_CREDENTIALS, S3_REGION, Stack, StackEndpoints
from ledger_deletion.settings import POOLS, Settings


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
