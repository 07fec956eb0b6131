"""kill -9 of a colocated process (every pool in one process, on one task queue) in the middle of a batch.

With ``colocate_pools`` one process holds everything a single-pool kill would take down separately: the
messages it received (Pulsar redelivers them to the next process, whose signal joins the running workflows),
the workflow tasks it held (replayed from history) and the activities it started eagerly (retried after their
start-to-close timeout, on the queue every process serves). Killed twice, restarted each time: nothing lost,
nothing wrong, nothing left unacked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import PoolSet, count_redeliverable
from devstack.stack import Stack
from ledger_deletion.settings import Settings
from tests.faults.support import run_batch, started_pools

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
async def colocated(module_settings: Settings, fault_stack: Stack) -> AsyncIterator[tuple[Settings, PoolSet]]:
    settings = module_settings.with_overrides(colocate_pools=True)
    log_name = f"{settings.task_queue_prefix}-colocated"
    async with started_pools(settings, fault_stack, ("all",), log_name) as pool_set:
        yield settings, pool_set


async def test_kill9_colocated_process_mid_batch_then_restart(
    fault_client: Client, colocated: tuple[Settings, PoolSet], cluster: SimulatedCluster
) -> None:
    settings, pools = colocated
    kills = 0

    async def fault() -> None:
        nonlocal kills
        for _ in range(2):
            await asyncio.sleep(1.0)
            pools.kill9("all")
            kills += 1
            await asyncio.sleep(1.5)
            await asyncio.to_thread(pools.restart, "all")

    report = await run_batch(fault_client, settings, cluster, fault, units=3, seed=11)
    assert kills == 2
    await asyncio.to_thread(pools.stop)
    await report.finish(settings)
    report.assert_promises()
    assert await asyncio.to_thread(count_redeliverable, settings, 1.0) == 0
