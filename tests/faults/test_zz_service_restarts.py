"""Stack services failing under a batch: ZooKeeper stopped, the Temporal dev server and pulsar-lite killed.

Last module of the fault tests (``zz``): these disrupt the (private) stack for everyone using it, so each
test restores the service and waits until the whole stack is healthy again before it checks anything.
The pools run in this process and survive the outage: the Temporal client and the Pulsar client reconnect,
kazoo reconnects, and every failed step is retried by Temporal.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import ServiceControl
from ledger_deletion.settings import Settings
from tests.faults.support import run_batch
from tests.support import running_pools

pytestmark = pytest.mark.stack


@pytest.fixture
def restart_settings(fault_settings: Settings) -> Settings:
    # An ack is routed to the live process holding the message; when its activity cannot start within
    # ack_schedule_to_start_seconds the workflow gives that ack up (meant for a dead holder, whose messages
    # Pulsar redelivers). After a Temporal restart the live pool's pollers need a few seconds to come back,
    # so the 4 s used by the pool-kill tests would give up acks of a live holder: use a production-like
    # margin (the default is 120 s). See docs/reliability.md, "Known limits".
    return fault_settings.with_overrides(ack_schedule_to_start_seconds=30)


async def test_zookeeper_stopped_longer_than_a_retry_interval(
    fault_client: Client, restart_settings: Settings, services: ServiceControl, cluster: SimulatedCluster
) -> None:
    # retry_max_interval_seconds is 3 s: an 8 s outage spans several retries of verify/delete.
    assert restart_settings.retry_max_interval_seconds < 8.0

    marked = asyncio.Event()

    async def fault() -> None:
        # Once the metadata updates have landed, while the workflows verify, wait out the grace and delete:
        # an outage that delayed a "late" update past the grace would correctly keep that ledger instead.
        await marked.wait()
        await asyncio.to_thread(services.stop, "zookeeper")
        await asyncio.sleep(8.0)
        await asyncio.to_thread(services.start)

    try:
        async with running_pools(restart_settings, fault_client):
            report = await run_batch(
                fault_client, restart_settings, cluster, fault, units=1, seed=21, marked=marked
            )
    finally:
        await asyncio.to_thread(services.start)
    await report.finish(restart_settings)
    report.assert_promises()


async def test_temporal_dev_server_killed_and_restarted_mid_batch(
    fault_client: Client, restart_settings: Settings, services: ServiceControl, cluster: SimulatedCluster
) -> None:
    """kill -9 of the dev server (file database, WAL): histories, timers and task queues survive it."""

    await kill9_and_restart_mid_batch("temporal", 22, fault_client, restart_settings, services, cluster)


async def test_pulsar_lite_killed_and_restarted_mid_batch(
    fault_client: Client, restart_settings: Settings, services: ServiceControl, cluster: SimulatedCluster
) -> None:
    """kill -9 of the broker: unacked messages are redelivered after it restarts; acks and dead letters
    that failed meanwhile are retried."""

    await kill9_and_restart_mid_batch("pulsar", 23, fault_client, restart_settings, services, cluster)


async def kill9_and_restart_mid_batch(
    service: str,
    seed: int,
    fault_client: Client,
    restart_settings: Settings,
    services: ServiceControl,
    cluster: SimulatedCluster,
) -> None:
    """One batch with ``service`` killed -9 1.5 s in and started again 2 s later; then every promise."""

    async def fault() -> None:
        await asyncio.sleep(1.5)
        await asyncio.to_thread(services.kill9, service)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(services.start)

    try:
        async with running_pools(restart_settings, fault_client):
            report = await run_batch(fault_client, restart_settings, cluster, fault, units=1, seed=seed)
    finally:
        await asyncio.to_thread(services.start)
    await report.finish(restart_settings)
    report.assert_promises()
