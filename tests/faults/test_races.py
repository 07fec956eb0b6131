"""Races that come from the protocol itself (PIP-186's mark phase), on the real stack.

The broker publishes the request *before* it updates the topic's metadata, the update may fail, the broker
re-sends on its next trim, and the deletion topic has several partitions, so copies of one request can
arrive in any order. A property-based test drives random interleavings of all of these and checks the
invariants: a ledger still referenced is never deleted, a ledger released in time is deleted, every
message is acked, no workflow is left running.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import S3FaultProxy
from devstack.soak import latest_result, wait_quiet
from devstack.stack import StackEndpoints
from ledger_deletion.contracts import DeletionResult, Outcome
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.request import LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.faults.support import make_fault_settings
from tests.support import running_pools, wait_until_all_acked
from workers.pools import RunningPools

pytestmark = pytest.mark.stack

PARTITIONS = 4  # pulsar-lite's default_partitions: the deletion topic's partitions


@pytest.fixture(scope="module")
def race_settings(fault_endpoints: StackEndpoints, s3_proxy: S3FaultProxy) -> Settings:
    return make_fault_settings(fault_endpoints, s3_proxy)


@pytest.fixture(scope="module")
async def race_pools(race_settings: Settings, fault_client: Client) -> AsyncIterator[RunningPools]:
    """All pools in this process (no process is killed here: start-up in ~1 s instead of ~10 s)."""
    async with running_pools(race_settings, fault_client) as running:
        yield running


class Partitions:
    """A producer on the deletion topic that puts each copy on the partition the test chooses."""

    def __init__(self, settings: Settings) -> None:
        import pulsar

        self.client = pulsar.Client(
            settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        self.producer = self.client.create_producer(
            settings.topic,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.CustomPartition,
            message_router=lambda message, count: int(message.properties()["race-partition"]) % count,
        )

    def publish(self, request: PendingDeleteLedgerInfo, partition: int) -> None:
        self.producer.send(encode_request(request), properties={"race-partition": str(partition)})

    def close(self) -> None:
        self.producer.close()
        self.client.close()


def fresh_topic(cluster: SimulatedCluster, ledgers: int) -> tuple[str, list[int]]:
    topic = f"race/{uuid.uuid4().hex[:8]}/t-partition-0"
    ids = cluster.new_ledger_ids(ledgers)
    cluster.create_topic(topic, ids)
    return topic, ids


async def test_request_before_metadata_update_is_deleted_once_released(
    race_pools: RunningPools, race_settings: Settings, fault_client: Client, cluster: SimulatedCluster
) -> None:
    topic, ids = fresh_topic(cluster, 3)
    (request,) = cluster.requests_for_trim(topic, [ids[0]])
    with RequestPublisher(race_settings) as publisher:
        publisher.publish(request)
    await asyncio.sleep(1.5)  # the workflow finds the ledger in use and waits on its durable timer
    assert cluster.ledger_exists(ids[0])
    cluster.remove_ledgers_from_metadata(topic, [ids[0]])
    result = await latest_result(fault_client, request.workflow_id, 60)
    assert result.outcome is Outcome.DELETED
    assert not cluster.ledger_exists(ids[0]) and all(cluster.ledger_exists(i) for i in ids[1:])
    await wait_until_all_acked(race_pools)


async def test_failed_metadata_update_keeps_the_ledger_until_the_broker_resends(
    race_pools: RunningPools, race_settings: Settings, fault_client: Client, cluster: SimulatedCluster
) -> None:
    """The update after the request failed: the ledger stays referenced and is never deleted. The broker's
    next trim re-sends the request after a successful update: then it goes."""
    topic, ids = fresh_topic(cluster, 3)
    (request,) = cluster.requests_for_trim(topic, [ids[0]])
    with RequestPublisher(race_settings) as publisher:
        publisher.publish(request)
        first = await latest_result(fault_client, request.workflow_id, 60)
        assert first.outcome is Outcome.SKIPPED_IN_USE
        assert cluster.ledger_exists(ids[0])
        cluster.remove_ledgers_from_metadata(topic, [ids[0]])  # the next trim succeeds
        publisher.publish(request)
        await asyncio.sleep(0.5)
    second = await latest_result(fault_client, request.workflow_id, 60)
    # The second request is a new run of the same workflow id (the first run closed).
    assert second.outcome is Outcome.DELETED
    assert not cluster.ledger_exists(ids[0]) and all(cluster.ledger_exists(i) for i in ids[1:])
    await wait_until_all_acked(race_pools)


async def test_same_ledger_requested_again_after_its_workflow_completed(
    race_pools: RunningPools, race_settings: Settings, fault_client: Client, cluster: SimulatedCluster
) -> None:
    topic, ids = fresh_topic(cluster, 3)
    requests = cluster.trim(topic, [ids[0]], lambda r: None)
    (request,) = requests
    with RequestPublisher(race_settings) as publisher:
        publisher.publish(request)
        first = await latest_result(fault_client, request.workflow_id, 60)
        assert first.outcome is Outcome.DELETED
        first_run = (await fault_client.get_workflow_handle(request.workflow_id).describe()).run_id
        publisher.publish(request)
        deadline = time.monotonic() + 60
        while (await fault_client.get_workflow_handle(request.workflow_id).describe()).run_id == first_run:
            assert time.monotonic() < deadline, "the repeated request never started a new run"
            await asyncio.sleep(0.2)
    second = await latest_result(fault_client, request.workflow_id, 60)
    assert second.outcome is Outcome.ALREADY_DELETED and second.messages_acked == 1
    assert all(cluster.ledger_exists(i) for i in ids[1:])
    await wait_until_all_acked(race_pools)


async def test_requests_reordered_across_partitions(
    race_pools: RunningPools, race_settings: Settings, fault_client: Client, cluster: SimulatedCluster
) -> None:
    """Copies of the same requests on different partitions, in reverse order, the offload request before
    the BookKeeper one: one workflow per (type, ledger), every copy acked, each ledger deleted once."""
    topic = f"race/{uuid.uuid4().hex[:8]}/t-partition-1"
    ids = cluster.new_ledger_ids(4)
    cluster.create_topic(topic, ids, offloaded={ids[0], ids[1]})
    keys = cluster.offload_keys(topic, ids[0]) + cluster.offload_keys(topic, ids[1])
    requests = cluster.requests_for_trim(topic, ids[:3])
    cluster.remove_ledgers_from_metadata(topic, ids[:3])
    partitions = Partitions(race_settings)
    try:
        for copy in range(3):
            for index, request in enumerate(reversed(requests)):
                partitions.publish(request, partition=index + copy)
    finally:
        partitions.close()
    results: list[DeletionResult] = [await latest_result(fault_client, r.workflow_id, 60) for r in requests]
    assert {r.outcome for r in results} <= {Outcome.DELETED, Outcome.ALREADY_DELETED}
    assert not any(cluster.ledger_exists(i) for i in ids[:3]) and cluster.ledger_exists(ids[3])
    assert not any(cluster.object_exists(k, b) for b, k in keys)
    assert {r.ledger_type for r in requests} == {LedgerType.LEDGER.value, LedgerType.OFFLOAD_LEDGER.value}
    await wait_until_all_acked(race_pools)
    assert await wait_quiet(fault_client, race_settings, timeout=30, quiet=1.0) == []


# --- property: random interleavings ------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerPlan:
    """What the "broker" does with one ledger: when it publishes (and how many copies, on which
    partitions), and when, if ever, its metadata update lands."""

    publish_at: tuple[tuple[float, int], ...]  # (seconds from start, partition) per copy
    update_at: float | None  # None: the metadata update failed and is never retried


GRACE_SAFE = 1.5  # updates within this of the first publish land well inside the in-use grace (3 × 1.5 s)

ledger_plans = st.builds(
    LedgerPlan,
    publish_at=st.lists(
        st.tuples(st.floats(0.0, 2.0).map(lambda s: round(s, 1)), st.integers(0, PARTITIONS - 1)),
        min_size=1,
        max_size=3,
    ).map(tuple),
    update_at=st.one_of(st.none(), st.floats(0.0, 2.0).map(lambda s: round(s, 1))),
)


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    # Each example costs seconds on the real stack: generate and run, no shrinking loop of dozens of runs.
    phases=[Phase.explicit, Phase.generate],
    derandomize=True,  # CI runs the same interleavings every time; failures are reproducible
)
@given(plans=st.lists(ledger_plans, min_size=2, max_size=4))
async def test_random_interleavings_keep_the_invariants(
    plans: list[LedgerPlan],
    race_pools: RunningPools,
    race_settings: Settings,
    fault_client: Client,
    cluster: SimulatedCluster,
) -> None:
    topic, ids = fresh_topic(cluster, len(plans) + 1)  # the last ledger is never requested: always kept
    requests = {i: cluster.requests_for_trim(topic, [i])[0] for i in ids[:-1]}
    events: list[tuple[float, str, int, int]] = []
    for ledger, plan in zip(ids, plans, strict=False):
        events += [(at, "publish", ledger, partition) for at, partition in plan.publish_at]
        if plan.update_at is not None:
            # The update comes at most GRACE_SAFE after the first copy, as a broker's would.
            first = min(at for at, _ in plan.publish_at)
            events.append((min(plan.update_at, first + GRACE_SAFE), "update", ledger, 0))
    events.sort(key=lambda e: (e[0], e[1] == "publish"))
    partitions = Partitions(race_settings)
    started = time.monotonic()
    try:
        for at, kind, ledger, partition in events:
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            if kind == "publish":
                await asyncio.to_thread(partitions.publish, requests[ledger], partition)
            else:
                await asyncio.to_thread(cluster.remove_ledgers_from_metadata, topic, [ledger])
    finally:
        partitions.close()
    results = {i: await latest_result(fault_client, requests[i].workflow_id, 90) for i in requests}
    assert await wait_quiet(fault_client, race_settings, timeout=60, quiet=1.0) == []
    await wait_until_all_acked(race_pools)
    for ledger, plan in zip(ids, plans, strict=False):
        outcome = results[ledger].outcome
        if plan.update_at is None:
            # Still referenced: never deleted, whatever the interleaving.
            assert cluster.ledger_exists(ledger), f"referenced ledger {ledger} was deleted ({plan})"
            assert outcome is Outcome.SKIPPED_IN_USE, (ledger, outcome, plan)
        else:
            assert not cluster.ledger_exists(ledger), f"released ledger {ledger} left behind ({plan})"
            assert outcome in (Outcome.DELETED, Outcome.ALREADY_DELETED), (ledger, outcome, plan)
    assert cluster.ledger_exists(ids[-1])
