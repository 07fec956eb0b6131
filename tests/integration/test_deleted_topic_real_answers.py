"""A request for a ledger of a deleted topic is decided against a broker that answers as a real one does.

A real broker answers internal-info for a managed ledger that does not exist with a bare 500 (the raw
``MetadataNotFoundException`` nothing maps, apache/pulsar#17121), and the partitioned metadata of that topic
with its own 404. The service used to retry the 500 and dead-letter the request: the orphans of a deleted
topic, the main source of orphans, were never deleted. The admin emulator answers like a broker since 2.8;
this module runs its own instance (current code) over the stack's ZooKeeper.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.pulsar_admin import PulsarAdminActivities
from devstack.admin_emulator import AdminEmulator
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient, topic_path
from ledger_deletion.contracts import CheckTopicInput, Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import private_emulator, running_pools, wait_for_result, wait_until_all_acked

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def broker(stack: StackEndpoints) -> Iterator[AdminEmulator]:
    with private_emulator(stack.zookeeper) as emulator:
        yield emulator


def test_check_topic_decides_a_deleted_topic_from_a_brokers_real_answers(
    broker: AdminEmulator, cluster: SimulatedCluster
) -> None:
    namespace = f"real/ns-{uuid.uuid4().hex[:6]}"
    kept, gone = f"{namespace}/kept", f"{namespace}/gone"
    cluster.create_topic(kept, cluster.new_ledger_ids(1))
    cluster.create_topic(gone, cluster.new_ledger_ids(1))
    cluster.delete_topic(gone)
    base = f"{namespace}/parted"  # schema ledgers are requested under a partitioned topic's base name
    for index in range(2):
        cluster.create_topic(f"{base}-partition-{index}", cluster.new_ledger_ids(1), partitions_of=base)

    # The broker's answers for the deleted topic, as the client asks (Accept: application/json).
    accept = {"Accept": "application/json"}
    info = httpx.get(f"{broker.urls[0]}{topic_path(gone)}/internal-info", headers=accept)
    assert (
        info.status_code == 500
        and "reason" not in info.json()
        and info.json()["message"] == "Request failed."
    )
    parts = httpx.get(
        f"{broker.urls[0]}{topic_path(gone)}/partitions", params={"checkAllowAutoCreation": "false"}
    )
    assert (parts.status_code, parts.json()) == (404, {"reason": f"Topic persistent://{gone} not found"})

    client = PulsarAdminClient(broker.urls[0], timeout_seconds=5)
    try:
        env, activities = ActivityEnvironment(), PulsarAdminActivities(client)
        assert not env.run(activities.check_topic, CheckTopicInput(gone)).exists
        assert env.run(activities.check_topic, CheckTopicInput(kept)).exists
        assert env.run(
            activities.check_topic, CheckTopicInput(base)
        ).exists  # internal-info of each partition
    finally:
        client.close()


async def test_a_ledger_of_a_deleted_topic_is_deleted(
    broker: AdminEmulator, cluster: SimulatedCluster, settings: Settings, temporal_client: Client
) -> None:
    """The whole service, its admin URL pointed at a broker with real answers: before, the request was
    retried on the 500 and dead-lettered."""
    suffix = uuid.uuid4().hex[:6]
    own = settings.with_overrides(
        topic=f"{settings.topic}-gone-{suffix}",
        task_queue_prefix=f"{settings.task_queue_prefix}-gone-{suffix}",
        pulsar_admin_url=broker.urls[0],
    )
    topic = f"real/ns-{suffix}/payments"
    orphan, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [orphan, current])
    (request,) = cluster.requests_for_trim(topic, [orphan])
    cluster.delete_topic(topic)  # deleted half-way: metadata gone, ledgers left behind

    async with running_pools(own, temporal_client) as running:
        with RequestPublisher(own) as publisher:
            publisher.publish(request)
        result = await wait_for_result(temporal_client, request.workflow_id, timeout=60)
        await wait_until_all_acked(running)

    assert result.outcome is Outcome.DELETED, result
    assert not cluster.ledger_exists(orphan)
