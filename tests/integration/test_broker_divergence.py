"""The service against brokers in the states a real cluster reaches, on the real stack.

The broker here is an admin emulator of this module's own (free ports, the stack's ZooKeeper), put into
those states through its test hook (devstack.broker_state): the passing 412s, 503s and dropped connections
of a rolling restart or a bundle move, a 307 to a peer cluster, and an owner whose memory lost ledgers its
metadata store still lists. The pools run in this process on the module's own topic and task queues.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.pulsar_admin import PulsarAdminActivities
from devstack.admin_emulator import AdminEmulator, owner_index
from devstack.broker_state import EmulatorControl, Fault
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.contracts import AskOwnerBrokerInput, CheckTopicInput, Outcome
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.conftest import running_pools, wait_for_result, wait_until_all_acked
from workers.pools import RunningPools

pytestmark = pytest.mark.stack


def _healthy(emulator: AdminEmulator) -> AdminEmulator:
    for base in emulator.urls:  # the ZooKeeper session connects in the background
        for _ in range(100):
            if httpx.get(f"{base}/health").status_code == 200:
                break
            time.sleep(0.1)
    return emulator


@pytest.fixture(scope="module")
def broker(stack: StackEndpoints) -> Iterator[AdminEmulator]:
    with AdminEmulator(stack.zookeeper, port=0, owner_port=0, cluster="standalone") as emulator:
        yield _healthy(emulator)


@pytest.fixture(scope="module")
def peer(stack: StackEndpoints) -> Iterator[AdminEmulator]:
    """Another cluster's brokers (same ZooKeeper here, so it knows none of ours' topics)."""
    with AdminEmulator(stack.zookeeper, port=0, owner_port=0, cluster="peer") as emulator:
        yield _healthy(emulator)


@pytest.fixture(scope="module")
def control(broker: AdminEmulator) -> Iterator[EmulatorControl]:
    client = EmulatorControl(broker.urls[0])
    yield client
    client.close()


@pytest.fixture(scope="module")
def cluster(stack: StackEndpoints, zk: Any, s3: Any) -> Iterator[SimulatedCluster]:
    simulated = SimulatedCluster(zk, s3, bucket=stack.offload_bucket)
    yield simulated
    simulated.cleanup()


@pytest.fixture(scope="module")
def own_settings(settings: Settings, broker: AdminEmulator) -> Settings:
    """The session's settings on this module's broker, topic and task queues. The broker is trusted only as
    the cluster lists it: a 307 to broker B is followed because /admin/v2/brokers/standalone names it."""
    return settings.with_overrides(
        pulsar_admin_url=broker.urls[0],
        pulsar_cluster="standalone",
        admin_trusted_hosts="",
        topic=f"{settings.topic}-divergence",
        task_queue_prefix=f"{settings.task_queue_prefix}-divergence",
    )


@pytest.fixture(scope="module")
async def service(own_settings: Settings, temporal_client: Client) -> AsyncIterator[RunningPools]:
    async with running_pools(own_settings, temporal_client) as running:
        yield running


@pytest.fixture(scope="module")
def publisher(own_settings: Settings) -> Iterator[RequestPublisher]:
    with RequestPublisher(own_settings) as publishing:
        yield publishing


def namespace() -> str:
    return f"divergence/ns-{uuid.uuid4().hex[:8]}"


def owned_by(index: int, prefix: str) -> str:
    return next(f"{prefix}/t{i}" for i in range(40) if owner_index(f"{prefix}/t{i}") == index)


def checked(request: PendingDeleteLedgerInfo) -> PendingDeleteLedgerInfo:
    """As a PIP-186 broker sends a trimmed ledger: the owner is asked whether it still uses it."""
    from dataclasses import replace

    return replace(request, check_ledger_still_in_use=True)


# --- 3. a passing answer is retried, not dead-lettered -----------------------------------------------------


ROLLING_RESTART = [
    pytest.param(Fault(endpoint="internalStats", times=2), id="412-failed-to-find-ownership"),
    pytest.param(
        Fault(endpoint="internalStats", times=2, reason="Can't find owner for topic persistent://x"),
        id="412-cant-find-owner",
    ),
    pytest.param(
        Fault(endpoint="internalStats", times=2, status=503, reason="Service unavailable"), id="503"
    ),
    pytest.param(Fault(endpoint="internalStats", times=2, drop_connection=True), id="connection-dropped"),
    pytest.param(Fault(endpoint="internal-info", times=2), id="412-on-check-topic"),
]


@pytest.mark.parametrize("fault", ROLLING_RESTART)
async def test_a_rolling_restart_delays_a_deletion_without_dead_lettering_it(
    service: RunningPools,
    publisher: RequestPublisher,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    temporal_client: Client,
    fault: Fault,
) -> None:
    """The owner answers as a broker does while its bundle moves, for two calls; then it serves again. The
    trimmed ledger is deleted on a retry, not dead-lettered at the first 412."""
    topic = owned_by(1, namespace())  # reached through broker A's 307 to broker B
    old, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [old, current])
    control.fail_next(topic, fault)
    [request] = cluster.trim(topic, [old], lambda r: publisher.publish(checked(r)))
    result = await wait_for_result(temporal_client, request.workflow_id, timeout=120)
    assert result.outcome is Outcome.DELETED, result
    assert not cluster.ledger_exists(old) and cluster.ledger_exists(current)
    assert control.clear_faults(topic) == 0  # both scripted answers were given
    await wait_until_all_acked(service)


# --- 5. redirects only into the cluster ---------------------------------------------------------------------


def test_a_307_to_a_listed_broker_is_followed(
    broker: AdminEmulator, cluster: SimulatedCluster, own_settings: Settings
) -> None:
    topic = owned_by(1, namespace())
    [ledger] = cluster.new_ledger_ids()
    cluster.create_topic(topic, [ledger])
    client = PulsarAdminClient(own_settings.pulsar_admin_url, cluster=own_settings.pulsar_cluster)
    try:
        answer = ActivityEnvironment().run(
            PulsarAdminActivities(client).ask_owner_broker, AskOwnerBrokerInput(topic, ledger)
        )
    finally:
        client.close()
    assert answer.in_use and answer.owner_url == broker.urls[1]


def test_a_peer_clusters_answer_never_says_the_topic_is_gone(
    broker: AdminEmulator,
    peer: AdminEmulator,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    own_settings: Settings,
) -> None:
    """A V1 global namespace replicated to a peer cluster: our broker redirects there
    (validateGlobalNamespaceOwnership), and the peer, which has no such topic, answers Pulsar's 404. Followed,
    that 404 reads "topic gone, ledger unused"; refused, the question is asked again later."""
    topic = owned_by(0, f"divergence/global/ns-{uuid.uuid4().hex[:6]}")
    [ledger] = cluster.new_ledger_ids()
    cluster.create_topic(topic, [ledger])
    path = f"/admin/persistent/{topic}/internalStats"
    for endpoint in ("internalStats", "partitions"):
        control.fail_next(topic, Fault(endpoint=endpoint, times=5, location=f"{peer.urls[0]}{path}"))
    client = PulsarAdminClient(own_settings.pulsar_admin_url, cluster=own_settings.pulsar_cluster)
    activities = PulsarAdminActivities(client)
    try:
        assert ActivityEnvironment().run(activities.check_topic, CheckTopicInput(topic)).exists
        with pytest.raises(ApplicationError) as raised:
            ActivityEnvironment().run(activities.ask_owner_broker, AskOwnerBrokerInput(topic, ledger))
    finally:
        client.close()
        control.clear_faults(topic)
    assert raised.value.type == "RedirectRefused" and not raised.value.non_retryable
    assert peer.urls[0].removeprefix("http://") in str(raised.value)
