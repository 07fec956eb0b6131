"""The brokers' own faults, on the private fault stack with the pools as processes: a rolling restart's
passing answers, and owners whose memory lost ledgers their metadata store still lists.

The admin emulator of that stack is put into those states through its test hook (devstack.broker_state);
every promise of the service is checked from outside, as for the other faults (tests/faults/support.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from devstack.broker_state import EmulatorControl
from devstack.cluster import SimulatedCluster
from devstack.faults import PoolSet, count_redeliverable, read_dead_letters
from devstack.soak import rolling_restart_storm
from devstack.stack import StackEndpoints
from ledger_deletion.contracts import Outcome
from ledger_deletion.settings import Settings
from tests.faults.support import run_batch

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def control(fault_endpoints: StackEndpoints) -> Iterator[EmulatorControl]:
    client = EmulatorControl(fault_endpoints.pulsar_admin_url)
    yield client
    client.close()


async def test_a_rolling_restart_storm_dead_letters_nothing(
    fault_client: Client,
    module_settings: Settings,
    pool_processes: PoolSet,
    cluster: SimulatedCluster,
    control: EmulatorControl,
) -> None:
    """Every topic of the batch answers 412 "Failed to find ownership" / "Can't find owner", 503, or drops
    the connection, for a few calls of any admin endpoint while the batch runs. All are retried: every
    eligible ledger is deleted, no request is dead-lettered but the undecodable ones."""
    queued: list[int] = []
    report = await run_batch(
        fault_client,
        module_settings,
        cluster,
        units=3,
        seed=32,
        before_publish=lambda batch: queued.append(rolling_restart_storm(control, batch, random.Random(32))),
    )
    assert queued and queued[0] >= len(report.batch.topics)
    assert report.unexpected == {} and report.storage_problems == [] and report.still_running == []
    assert all(control.clear_faults(topic) == 0 for topic in report.batch.topics)  # every answer was given
    letters = await asyncio.to_thread(read_dead_letters, module_settings, 1.0, len(report.batch.garbage))
    # The other cluster's ledgers, listed by its store, are kept for replay like any store listing: the
    # storm must add no dead letter of its own to the rest.
    batch_runs = {wid for wid, e in report.batch.expectations.items() if e.kind != "peer"}
    assert [m for m in letters if m.properties().get("ledger-deletion.workflow-id") in batch_runs] == []
    # Acks are counted once the pools stop, after the next test (the module shares them).


async def test_owners_and_stores_that_disagree_keep_then_replay(
    fault_client: Client,
    module_settings: Settings,
    pool_processes: PoolSet,
    cluster: SimulatedCluster,
    control: EmulatorControl,
) -> None:
    """In every topic one trim reaches the owner's memory and its store write fails (one of them of an
    offloaded ledger): those requests are dead-lettered for replay, their ledgers and objects kept. Then the
    owner's next store write lands, the requests are replayed from the dead-letter topic, and they delete.
    Everything else in the batch ends as usual."""
    report = await run_batch(
        fault_client, module_settings, cluster, units=3, seed=33, control=control, diverge=True
    )
    diverged = {i for _, ids in report.batch.divergences for i in ids}
    replayed = [e for e in report.batch.expectations.values() if e.request.ledger_id in diverged]
    assert len(replayed) == 3 + 1  # a LEDGER request per unit, and the offloaded one's OFFLOAD_LEDGER
    assert all(report.results[e.request.workflow_id].outcome is Outcome.DEAD_LETTERED for e in replayed)
    await asyncio.to_thread(pool_processes.stop)
    await report.finish(module_settings)
    report.assert_promises()  # the replays deleted (storage, outcomes), nothing unacked
    assert await asyncio.to_thread(count_redeliverable, module_settings, 1.0) == 0
