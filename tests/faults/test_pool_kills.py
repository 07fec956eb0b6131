"""kill -9 of pool processes in the middle of a batch, then fresh processes: nothing lost, nothing wrong.

The pools run as separate ``ledger-deletion worker --pool X`` processes (the production layout), so a
SIGKILL takes exactly one pool down with whatever it held: running activities (Temporal retries them on the
next process once their start-to-close timeout passes), workflow tasks (replayed from history by the new
workflow worker), unacked messages (Pulsar redelivers them to the new consumer, whose signal joins the
running workflow or starts a new run that finds the ledger already deleted).

Each test has its own pool processes, topic and queues, and ends by checking that nothing of it is left
unacked on its subscription.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import PoolSet, count_redeliverable
from devstack.soak import latest_result
from devstack.stack import Stack
from ledger_deletion.contracts import Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.faults.support import (
    CLOSE_BOUND_SECONDS,
    messages_joined,
    run_batch,
    started_pools,
    started_run_ids,
)

pytestmark = pytest.mark.stack


@pytest.fixture
def patient_settings(fault_settings: Settings) -> Settings:
    """The owner is asked again every second for a minute: long enough for a killed pulsar pool to be back,
    and its redelivered messages joined, while every run still waits on its in-use ledger."""
    return fault_settings.with_overrides(in_use_rechecks=60, in_use_recheck_seconds=1.0)


async def test_pulsar_pool_dies_after_start_before_ack(
    fault_client: Client, patient_settings: Settings, fault_stack: Stack, cluster: SimulatedCluster
) -> None:
    """The pulsar pool started the workflows (they sit in their in-use grace) and dies before acking.

    Pulsar redelivers the messages to the new process, whose signal joins the running workflows: each
    workflow acks through the new process's ack queue (the dead process's refs time out harmlessly), and
    each ledger is deleted once, by compare-and-delete.

    The ledgers leave the metadata only once every redelivered copy has joined its run: were they to leave
    before, a run could decide, give up its ack on the dead holder and close, and the copy would start a
    second run (ALREADY_DELETED, acked there). That is correct too, but not what this test is about.
    """
    topic = f"fault/before-ack-{time.monotonic_ns()}/t"
    ids = cluster.new_ledger_ids(6)
    cluster.create_topic(topic, ids)
    requests = cluster.requests_for_trim(topic, ids[:4])  # before the metadata update: in use for now
    workflow_ids = [r.workflow_id for r in requests]
    async with started_pools(patient_settings, fault_stack, log_name="before-ack") as pools:
        with RequestPublisher(patient_settings) as publisher:
            for request in requests:
                publisher.publish(request)
        # Until the ingest loop has started every workflow; nothing is acked yet.
        run_ids = await started_run_ids(fault_client, workflow_ids)
        pools.kill9("pulsar")
        await asyncio.to_thread(pools.restart, "pulsar")
        # Each run now holds two references to its message: the dead holder's and the new one's.
        await messages_joined(fault_client, workflow_ids, 2)
        cluster.remove_ledgers_from_metadata(topic, ids[:4])
        results = [await latest_result(fault_client, i, CLOSE_BOUND_SECONDS) for i in workflow_ids]
        assert await started_run_ids(fault_client, workflow_ids) == run_ids  # no second run of any
        assert [r.outcome for r in results] == [Outcome.DELETED] * 4
        # Acked once, through the new process; the dead holder's ack was given up (schedule-to-start).
        assert [(r.messages_acked, r.messages_unacked) for r in results] == [(1, 1)] * 4
        assert not any(cluster.ledger_exists(i) for i in ids[:4])
        assert all(cluster.ledger_exists(i) for i in ids[4:])
    assert await asyncio.to_thread(count_redeliverable, patient_settings, 1.0) == 0


async def test_kill9_each_pool_mid_batch_then_restart(
    fault_client: Client, module_settings: Settings, pool_processes: PoolSet, cluster: SimulatedCluster
) -> None:
    """One batch; the workflow, pulsar, bookkeeper and offload pools are each killed -9 at a different
    moment of it and started again 1.5 s later."""
    killed: list[str] = []

    async def fault() -> None:
        for pool in ("workflow", "pulsar", "bookkeeper", "offload"):
            await asyncio.sleep(1.0)
            pool_processes.kill9(pool)
            killed.append(pool)
            await asyncio.sleep(1.5)
            await asyncio.to_thread(pool_processes.restart, pool)

    report = await run_batch(fault_client, module_settings, cluster, fault, units=3, seed=4)
    assert killed == ["workflow", "pulsar", "bookkeeper", "offload"]
    await asyncio.to_thread(pool_processes.stop)
    await report.finish(module_settings)
    report.assert_promises()
    assert await asyncio.to_thread(count_redeliverable, module_settings, 1.0) == 0
