"""The admin emulator in the states a real broker reaches (devstack.broker_state), over the stack's ZooKeeper:
an owner whose memory lost ledgers the store still lists, the passing failures of a rolling restart, the
cluster's broker list, and topic stats with pulsar-lite's subscription backlogs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pulsar
import pytest

from devstack.admin_emulator import AdminEmulator, owner_index
from devstack.broker_state import EmulatorControl, Fault
from devstack.cluster import SimulatedCluster
from devstack.pulsar_lite import PrivatePulsarLite
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.pulsar_admin import topic_path
from tests.support import private_emulator

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def lite() -> Iterator[PrivatePulsarLite]:
    with PrivatePulsarLite() as broker:
        yield broker


@pytest.fixture(scope="module")
def emulator(stack: StackEndpoints, lite: PrivatePulsarLite) -> Iterator[AdminEmulator]:
    """An emulator of this module's own (free ports): the stack's may run an older build of this code."""
    with private_emulator(stack.zookeeper, pulsar_metrics=lite.metrics_url) as started:
        yield started


@pytest.fixture
def control(emulator: AdminEmulator) -> Iterator[EmulatorControl]:
    client = EmulatorControl(emulator.urls[0])
    yield client
    client.close()


def get(emulator: AdminEmulator, topic: str, op: str, **params: str) -> httpx.Response:
    return httpx.get(f"{emulator.urls[0]}{topic_path(topic)}/{op}", params=params, follow_redirects=True)


def listed(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text
    return [int(entry["ledgerId"]) for entry in response.json()["ledgers"]]


@pytest.mark.parametrize("owner", [0, 1])
def test_the_owner_forgets_what_a_failed_store_write_left_in_the_store(
    emulator: AdminEmulator,
    control: EmulatorControl,
    cluster: SimulatedCluster,
    topic_owned_by: Callable[[int], str],
    owner: int,
) -> None:
    topic = topic_owned_by(owner)
    old, offloaded, current = cluster.new_ledger_ids(3)
    cluster.create_topic(topic, [old, offloaded, current], offloaded=[offloaded])
    assert control.fail_trim_store_write(topic, [old], bookkeeper_deleted=[offloaded]) == [offloaded, current]
    assert listed(get(emulator, topic, "internalStats")) == [offloaded, current]  # memory
    assert listed(get(emulator, topic, "internal-info")) == [old, offloaded, current]  # the store
    control.reload(topic)  # a new owner reads the store
    assert listed(get(emulator, topic, "internalStats")) == [old, offloaded, current]


def test_the_owners_memory_follows_the_store_except_where_the_write_failed(
    emulator: AdminEmulator, control: EmulatorControl, cluster: SimulatedCluster
) -> None:
    """A later trim that succeeds reaches memory and store alike; the owner's next store write persists the
    ledger its failed one left behind, and then the two agree again."""
    topic = f"public/default/follow-{uuid.uuid4().hex[:8]}"
    lost, trimmed, current = cluster.new_ledger_ids(3)
    cluster.create_topic(topic, [lost, trimmed, current])
    control.fail_trim_store_write(topic, [lost])
    cluster.remove_ledgers_from_metadata(topic, [trimmed])  # a later trim, store write successful
    assert listed(get(emulator, topic, "internalStats")) == [current]
    assert listed(get(emulator, topic, "internal-info")) == [lost, current]
    cluster.remove_ledgers_from_metadata(topic, [lost])  # the owner's next store write
    assert listed(get(emulator, topic, "internal-info")) == listed(get(emulator, topic, "internalStats"))


def test_a_rolling_restart_answers_412_then_serves(
    emulator: AdminEmulator, control: EmulatorControl, cluster: SimulatedCluster
) -> None:
    topic = f"public/default/restart-{uuid.uuid4().hex[:8]}"
    [ledger] = cluster.new_ledger_ids()
    cluster.create_topic(topic, [ledger])
    control.fail_next(topic, Fault(endpoint="internalStats", times=2))
    for _ in range(2):
        answer = get(emulator, topic, "internalStats")
        assert answer.status_code == 412
        assert answer.json() == {"reason": f"Failed to find ownership for topic:persistent://{topic}"}
    assert get(emulator, topic, "internal-info").status_code == 200  # another endpoint: served
    assert listed(get(emulator, topic, "internalStats")) == [ledger]
    control.fail_next(topic, Fault(status=503, reason="Service unavailable", times=5))
    assert get(emulator, topic, "partitions").status_code == 503
    assert control.clear_faults(topic) == 4


def test_a_broker_that_drops_the_connection(
    emulator: AdminEmulator, control: EmulatorControl, cluster: SimulatedCluster
) -> None:
    topic = f"public/default/drop-{uuid.uuid4().hex[:8]}"
    [ledger] = cluster.new_ledger_ids()
    cluster.create_topic(topic, [ledger])
    control.fail_next(topic, Fault(drop_connection=True))
    with pytest.raises(httpx.TransportError):
        get(emulator, topic, "internal-info")
    assert listed(get(emulator, topic, "internal-info")) == [ledger]  # the emulator is still serving


def test_a_scripted_redirect_elsewhere(
    emulator: AdminEmulator, control: EmulatorControl, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(0)
    control.fail_next(topic, Fault(location="http://peer-cluster.example:8080/admin/v2/x"))
    answer = httpx.get(f"{emulator.urls[0]}{topic_path(topic)}/internalStats")
    assert (answer.status_code, answer.headers["location"]) == (
        307,
        "http://peer-cluster.example:8080/admin/v2/x",
    )


def test_the_cluster_lists_both_brokers(emulator: AdminEmulator) -> None:
    for base in emulator.urls:
        answer = httpx.get(f"{base}/admin/v2/brokers/standalone")
        assert sorted(answer.json()) == sorted(url.removeprefix("http://") for url in emulator.urls)


def test_topic_stats_carry_pulsar_lites_backlog(emulator: AdminEmulator, lite: PrivatePulsarLite) -> None:
    """partitioned-stats sums the partitions (any broker answers); stats of one partition comes from its
    owner (307); the base name of a partitioned topic has no stats of its own."""
    topic = f"persistent://public/default/backlog-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(lite.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(7):
            producer.send(f"m{i}".encode())
        consumer.acknowledge(consumer.receive(5000))
        deadline = time.monotonic() + 30  # pulsar-lite refreshes its gauges every few seconds
        while True:
            stats = get(emulator, topic, "partitioned-stats", perPartition="false")
            assert stats.status_code == 200, stats.text
            if stats.json()["subscriptions"]["sub"]["msgBacklog"] == 6 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        body: dict[str, Any] = stats.json()
        assert body["subscriptions"]["sub"]["msgBacklog"] == 6
        assert body["metadata"] == {"partitions": 4} and body["partitions"] == {}
        per_partition = [
            get(emulator, f"{topic}-partition-{i}", "stats").json()["subscriptions"]["sub"]["msgBacklog"]
            for i in range(4)
        ]
        assert sum(per_partition) == 6
        assert get(emulator, topic, "stats").status_code == 404
        missing = f"persistent://public/default/never-{uuid.uuid4().hex[:8]}"
        assert get(emulator, missing, "partitioned-stats").status_code == 404
    finally:
        client.close()


def test_stats_need_pulsar_lites_metrics(stack: StackEndpoints) -> None:
    """Without them the emulator says it cannot tell, rather than answering an empty backlog."""
    with AdminEmulator(stack.zookeeper, port=0, owner_port=0) as bare:
        topic = "public/default/anything"
        assert owner_index(topic) in (0, 1)
        answer = httpx.get(f"{bare.urls[0]}{topic_path(topic)}/partitioned-stats")
        assert answer.status_code == 503
