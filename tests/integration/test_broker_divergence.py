"""The service against brokers in the states a real cluster reaches, on the real stack.

The broker here is an admin emulator of this module's own (free ports, the stack's ZooKeeper), put into
those states through its test hook (devstack.broker_state): the passing 412s, 503s and dropped connections
of a rolling restart or a bundle move, a 307 to a peer cluster, and an owner whose memory lost ledgers its
metadata store still lists. The pools run in this process on the module's own topic and task queues.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.pulsar_admin import PulsarAdminActivities
from devstack.admin_emulator import AdminEmulator, owner_index
from devstack.broker_state import EmulatorControl, Fault
from devstack.cluster import SimulatedCluster
from devstack.faults import read_dead_letters
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.contracts import AskOwnerBrokerInput, CheckTopicInput, DeletionResult, Outcome
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import private_emulator, running_pools, wait_for_result, wait_until_all_acked
from workers.pools import RunningPools

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def broker(stack: StackEndpoints) -> Iterator[AdminEmulator]:
    with private_emulator(stack.zookeeper, cluster="standalone") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def peer(stack: StackEndpoints) -> Iterator[AdminEmulator]:
    """Another cluster's brokers (same ZooKeeper here, so it knows none of ours' topics)."""
    with private_emulator(stack.zookeeper, cluster="peer") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def control(broker: AdminEmulator) -> Iterator[EmulatorControl]:
    client = EmulatorControl(broker.urls[0])
    yield client
    client.close()


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
        # The simulated cluster's ledgers are old; the one a rollover creates here is not (point 4).
        min_ledger_age_seconds=3,
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
    result = await wait_for_result(temporal_client, request.workflow_id)
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


# --- 1 and 2. owner and store disagree ---------------------------------------------------------------------


def dead_letter_reasons(settings: Settings, workflow_ids: set[str]) -> dict[str, str]:
    """The dead-letter topic's reason for each of these workflows (other tests' letters are skipped)."""
    letters = read_dead_letters(settings, expect=None, quiet_seconds=1.0, timeout=30)
    found: dict[str, str] = {}
    for letter in letters:
        props = letter.properties()
        if props.get("ledger-deletion.workflow-id") in workflow_ids:
            found[props["ledger-deletion.workflow-id"]] = props["ledger-deletion.reason"]
    return found


async def result_of_a_new_run(client: Client, workflow_id: str, previous_run: str) -> DeletionResult:
    deadline = time.monotonic() + 60
    while (run := (await client.get_workflow_handle(workflow_id).describe()).run_id) == previous_run:
        assert time.monotonic() < deadline, "the replayed request started no new run"
        await asyncio.sleep(0.3)
    return await client.get_workflow_handle(workflow_id, run_id=run, result_type=DeletionResult).result()


def failed_trim(
    cluster: SimulatedCluster,
    control: EmulatorControl,
    publisher: RequestPublisher,
    topic: str,
    ids: list[int],
) -> list[PendingDeleteLedgerInfo]:
    """internalTrimLedgers with a store write that fails: the requests are sent, the owner drops the ledgers
    from memory, and the store keeps them (the failure is not rolled back)."""
    requests = [checked(r) for r in cluster.requests_for_trim(topic, ids)]
    for request in requests:
        publisher.publish(request)
    control.fail_trim_store_write(topic, ids)
    return requests


async def test_a_trim_whose_store_write_failed_is_kept_for_replay_not_acked(
    service: RunningPools,
    publisher: RequestPublisher,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    temporal_client: Client,
    own_settings: Settings,
) -> None:
    """Point 2: the owner no longer lists the ledger, the store still does. The broker will not send the
    request again (its next trim works from memory), so acking it as in use would lose it: it is kept in the
    dead-letter topic, and the ledger in BookKeeper. Once the owner's next store write drops the ledger from
    the store, the replayed request deletes it."""
    topic = owned_by(1, namespace())
    old, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [old, current])
    [request] = failed_trim(cluster, control, publisher, topic, [old])
    result = await wait_for_result(temporal_client, request.workflow_id)
    assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "wait_in_use", result
    assert "KeptForReplay" in result.reason and "its owner broker does not list it" in result.reason
    assert cluster.ledger_exists(old) and result.messages_acked == 1
    reasons = dead_letter_reasons(own_settings, {request.workflow_id})
    assert "lists it in Pulsar's metadata store" in reasons[request.workflow_id]
    # The owner's next successful store write persists its memory: the ledger is listed nowhere now.
    cluster.remove_ledgers_from_metadata(topic, [old])
    control.reload(topic)
    first_run = (await temporal_client.get_workflow_handle(request.workflow_id).describe()).run_id
    publisher.publish(request)  # the replay
    replayed = await result_of_a_new_run(temporal_client, request.workflow_id, first_run)
    assert replayed.outcome is Outcome.DELETED and not cluster.ledger_exists(old)
    await wait_until_all_acked(service)


async def test_a_reload_brings_the_ledger_back_and_the_owner_keeps_it(
    service: RunningPools,
    publisher: RequestPublisher,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    temporal_client: Client,
) -> None:
    """The topic reloads before the request is decided: the new owner reads the store, lists the ledger as
    its own again, and will trim it (and send a request) later: in use, acked."""
    topic = owned_by(0, namespace())
    old, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [old, current])
    control.fail_trim_store_write(topic, [old])
    control.reload(topic)
    request = checked(cluster.requests_for_trim(topic, [old])[0])
    publisher.publish(request)
    result = await wait_for_result(temporal_client, request.workflow_id)
    assert result.outcome is Outcome.SKIPPED_IN_USE and cluster.ledger_exists(old)
    await wait_until_all_acked(service)


async def test_offloaded_objects_the_store_still_lists_are_never_deleted(
    service: RunningPools,
    publisher: RequestPublisher,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    temporal_client: Client,
) -> None:
    """Point 1: the same failed trim of an offloaded ledger. Its objects are what the next owner reads the
    ledger from: the OFFLOAD_LEDGER request must not delete them on the owner's word alone."""
    topic = owned_by(1, namespace())
    old, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [old, current], offloaded=[old])
    keys = [key for _, key in cluster.offload_keys(topic, old)]
    requests = failed_trim(cluster, control, publisher, topic, [old])
    assert sorted(r.ledger_type.value for r in requests) == ["LEDGER", "OFFLOAD_LEDGER"]
    for request in requests:
        result = await wait_for_result(temporal_client, request.workflow_id)
        assert result.outcome is Outcome.DEAD_LETTERED and "KeptForReplay" in result.reason, result
    assert all(cluster.object_exists(key) for key in keys) and cluster.ledger_exists(old)
    await wait_until_all_acked(service)


async def test_a_bk_copy_released_only_in_the_owners_memory_is_kept_for_replay(
    service: RunningPools,
    publisher: RequestPublisher,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    temporal_client: Client,
) -> None:
    """Point 2, the released-copy path: after the offload deletion lag the owner marks the BookKeeper copy
    bookkeeperDeleted in memory and sends its deletion; the store write fails. The owner still lists the
    ledger (read from tiered storage), the store has not released the copy: kept for replay, not acked."""
    topic = owned_by(0, namespace())
    offloaded, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [offloaded, current], offloaded=[offloaded])
    [bk_copy] = [
        checked(r) for r in cluster.requests_for_trim(topic, [offloaded]) if r.ledger_type.value == "LEDGER"
    ]
    publisher.publish(bk_copy)
    control.fail_trim_store_write(topic, bookkeeper_deleted=[offloaded])
    result = await wait_for_result(temporal_client, bk_copy.workflow_id)
    assert result.outcome is Outcome.DEAD_LETTERED, result
    assert "has not released its BookKeeper copy" in result.reason and cluster.ledger_exists(offloaded)
    await wait_until_all_acked(service)


# --- 4. a brand-new or still-open ledger -----------------------------------------------------------------


async def test_the_ledger_a_rollover_is_creating_is_never_deleted(
    service: RunningPools,
    publisher: RequestPublisher,
    cluster: SimulatedCluster,
    temporal_client: Client,
) -> None:
    """Point 4: a rollover created the topic's next ledger (OPEN, just now) and has not written the store
    yet; nobody lists it. A request for it (a buggy or hostile producer) waits out the minimum age, and then
    finds it open and newer than every ledger the topic lists: kept for replay."""
    topic = owned_by(1, namespace())
    old, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [old, current])
    rolling = cluster.roll_over(topic)
    request = PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, rolling, check_ledger_still_in_use=True
    )
    publisher.publish(request)
    result = await wait_for_result(temporal_client, request.workflow_id)
    assert result.outcome is Outcome.DEAD_LETTERED and "KeptForReplay" in result.reason, result
    assert f"ledger {rolling} is OPEN" in result.reason and cluster.ledger_exists(rolling)
    await wait_until_all_acked(service)


async def test_the_ledger_a_rollover_has_listed_is_in_use(
    service: RunningPools,
    publisher: RequestPublisher,
    cluster: SimulatedCluster,
    temporal_client: Client,
) -> None:
    topic = owned_by(0, namespace())
    old, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [old, current])
    rolled = cluster.roll_over(topic, stored=True)
    request = PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, rolled, check_ledger_still_in_use=True
    )
    publisher.publish(request)
    result = await wait_for_result(temporal_client, request.workflow_id)
    assert result.outcome is Outcome.SKIPPED_IN_USE and cluster.ledger_exists(rolled)
    await wait_until_all_acked(service)
