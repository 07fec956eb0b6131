"""kill -9 of each pool process in the middle of a batch, then a fresh process: nothing lost, nothing wrong.

The pools run as separate ``ledger-deletion worker --pool X`` processes (the production layout), so a
SIGKILL takes exactly one pool down with whatever it held: running activities (Temporal retries them on
the next process after the heartbeat-less start-to-close timeout or at once for the workflow pool's
sticky queue), unacked messages (Pulsar redelivers them to the new consumer).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import PoolSet, count_redeliverable
from ledger_deletion.contracts import Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.soak import latest_result, wait_quiet
from ledger_deletion.submit import RequestPublisher
from tests.faults.support import CLOSE_BOUND_SECONDS, run_batch

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("pool", ["workflow", "pulsar", "bookkeeper", "offload"])  # index = batch seed
async def test_kill9_pool_mid_batch_then_restart(
    pool: str, fault_client: Client, fault_settings: Settings, pools: PoolSet, cluster: SimulatedCluster
) -> None:
    async def fault() -> None:
        await asyncio.sleep(1.0)  # the batch is being published and the first workflows run
        pools.kill9(pool)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(pools.restart, pool)

    report = await run_batch(fault_client, fault_settings, pools, cluster, fault, units=2, seed=len(pool))
    report.assert_promises()


async def test_pulsar_pool_dies_after_start_before_ack(
    fault_client: Client, fault_settings: Settings, pools: PoolSet, cluster: SimulatedCluster
) -> None:
    """The pulsar pool started the workflows (they sit in their in-use grace) and dies before acking.

    Pulsar redelivers the messages to the new process, whose signal joins the running workflows: each
    workflow acks through the new process's ack queue, the old process's refs time out harmlessly, and the
    ledgers are deleted once, by compare-and-delete.
    """
    topic = f"fault/before-ack-{time.monotonic_ns()}/t"
    ids = cluster.new_ledger_ids(6)
    cluster.create_topic(topic, ids)
    requests = cluster.requests_for_trim(topic, ids[:4])  # before the metadata update: in use for now
    with RequestPublisher(fault_settings) as publisher:
        for request in requests:
            publisher.publish(request)
    # Until every workflow exists: the ingest loop has started them, and nothing has been acked.
    deadline = time.monotonic() + 60
    for request in requests:
        while True:
            try:
                await fault_client.get_workflow_handle(request.workflow_id).describe()
                break
            except Exception:
                assert time.monotonic() < deadline, f"{request.workflow_id} never started"
                await asyncio.sleep(0.2)
    pools.kill9("pulsar")
    cluster.remove_ledgers_from_metadata(topic, ids[:4])
    await asyncio.to_thread(pools.restart, "pulsar")
    results = [await latest_result(fault_client, r.workflow_id, CLOSE_BOUND_SECONDS) for r in requests]
    assert {r.outcome for r in results} <= {Outcome.DELETED, Outcome.ALREADY_DELETED}
    # Acked through the new process (the old refs' acks time out: their holder is gone).
    assert all(r.messages_acked >= 1 for r in results)
    assert not any(cluster.ledger_exists(i) for i in ids[:4])
    assert all(cluster.ledger_exists(i) for i in ids[4:])
    assert await wait_quiet(fault_client, fault_settings, timeout=60, quiet=2.0) == []
    await asyncio.to_thread(pools.stop)
    assert await asyncio.to_thread(count_redeliverable, fault_settings, 3.0) == 0
