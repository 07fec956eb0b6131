"""kill -9 of pool processes in the middle of a batch, then fresh processes: nothing lost, nothing wrong.

The pools run as separate ``ledger-deletion worker --pool X`` processes (the production layout), so a
SIGKILL takes exactly one pool down with whatever it held: running activities (Temporal retries them on the
next process once their start-to-close timeout passes), workflow tasks (replayed from history by the new
workflow worker), unacked messages (Pulsar redelivers them to the new consumer, whose signal joins the
running workflow or starts a new run that finds the ledger already deleted).

Both tests share one set of pool processes (module scope); the second stops them and checks that nothing
of either test is left unacked on the subscription.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import PoolSet, count_redeliverable
from devstack.soak import latest_result
from ledger_deletion.contracts import Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.faults.support import CLOSE_BOUND_SECONDS, run_batch, started_run_ids

pytestmark = pytest.mark.stack


async def test_pulsar_pool_dies_after_start_before_ack(
    fault_client: Client, module_settings: Settings, pool_processes: PoolSet, cluster: SimulatedCluster
) -> None:
    """The pulsar pool started the workflows (they sit in their in-use grace) and dies before acking.

    Pulsar redelivers the messages to the new process, whose signal joins the running workflows: each
    workflow acks through the new process's ack queue (the dead process's refs time out harmlessly), and
    each ledger is deleted once, by compare-and-delete.
    """
    topic = f"fault/before-ack-{time.monotonic_ns()}/t"
    ids = cluster.new_ledger_ids(6)
    cluster.create_topic(topic, ids)
    requests = cluster.requests_for_trim(topic, ids[:4])  # before the metadata update: in use for now
    with RequestPublisher(module_settings) as publisher:
        for request in requests:
            publisher.publish(request)
    # Until the ingest loop has started every workflow; nothing is acked yet.
    await started_run_ids(fault_client, [r.workflow_id for r in requests])
    pool_processes.kill9("pulsar")
    cluster.remove_ledgers_from_metadata(topic, ids[:4])
    await asyncio.to_thread(pool_processes.restart, "pulsar")
    results = [await latest_result(fault_client, r.workflow_id, CLOSE_BOUND_SECONDS) for r in requests]
    assert {r.outcome for r in results} <= {Outcome.DELETED, Outcome.ALREADY_DELETED}
    assert all(r.messages_acked >= 1 for r in results)  # through the new process
    assert not any(cluster.ledger_exists(i) for i in ids[:4])
    assert all(cluster.ledger_exists(i) for i in ids[4:])


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
