"""The admin emulator against real ZooKeeper: Pulsar's response shapes, owner redirects and token auth."""

from __future__ import annotations

import http.client
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from devstack.admin_emulator import AdminEmulator, owner_index
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient, ledgers_in_use, topic_path
from ledger_deletion.errors import AuthorizationError
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import schema_id_for_topic
from tests.support import private_emulator

pytestmark = pytest.mark.stack

TOKEN = "test-token-123"


def url(base: str, topic: str, op: str) -> str:
    return f"{base}{topic_path(topic)}/{op}"


def get_following(base: str, topic: str, op: str) -> httpx.Response:
    return httpx.get(url(base, topic, op), follow_redirects=True, timeout=10)


@pytest.fixture(scope="module")
def secured(stack: StackEndpoints) -> Iterator[AdminEmulator]:
    """A second emulator (free ports) that requires a bearer token, over the same ZooKeeper."""
    with private_emulator(stack.zookeeper, token=TOKEN) as emulator:
        yield emulator


def test_missing_topic_answers_as_a_real_broker(
    stack: StackEndpoints, topic_owned_by: Callable[[int], str]
) -> None:
    """internal-info of a missing managed ledger is the bare 500 of an unmapped exception
    (apache/pulsar#17121), not a 404; the partitioned metadata answers Pulsar's own 404 once no managed
    ledger exists."""
    for owner in (0, 1):
        topic = topic_owned_by(owner)
        info = httpx.get(url(stack.pulsar_admin_url, topic, "internal-info"))
        assert info.status_code == 500 and "reason" not in info.text
        stats = get_following(stack.pulsar_admin_url, topic, "internalStats")
        assert stats.status_code == 404
        partitions = httpx.get(url(stack.pulsar_admin_url, topic, "partitions"))
        assert partitions.status_code == 404
        assert partitions.json() == {"reason": f"Topic persistent://{topic} not found"}


def test_internal_info_shape(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(1)  # internal-info has no owner check: broker A answers for B's topic too
    first, second, current, cursor_ledger = cluster.new_ledger_ids(4)
    cluster.create_topic(topic, [first, second, current], offloaded={first}, entries=10, entry_size=100)
    cluster.add_cursor(topic, "sub-a", cursor_ledger, mark_delete=(second, 4))

    response = httpx.get(url(stack.pulsar_admin_url, topic, "internal-info"))

    assert response.status_code == 200
    body = response.json()
    assert body["version"] == 0
    assert body["creationDate"].endswith("Z") and body["modificationDate"]
    assert [ledger["ledgerId"] for ledger in body["ledgers"]] == [first, second, current]
    assert [ledger["isOffloaded"] for ledger in body["ledgers"]] == [True, False, False]
    assert {ledger["entries"] for ledger in body["ledgers"]} == {10}
    assert {ledger["size"] for ledger in body["ledgers"]} == {1000}
    assert all(ledger["timestamp"] > 0 for ledger in body["ledgers"])
    assert "terminatedPosition" not in body  # null fields are left out, as Pulsar's ObjectMapper does
    cursor = body["cursors"]["sub-a"]
    assert cursor["cursorsLedgerId"] == cursor_ledger
    assert cursor["markDelete"] == {"ledgerId": second, "entryId": 4}
    assert cursor["version"] == 0


def test_internal_stats_shape_and_in_use_set(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(0)  # owned by broker A: answered without a redirect
    first, current, cursor_ledger, schema_old, schema_new, compacted = cluster.new_ledger_ids(6)
    cluster.create_topic(topic, [first, current], offloaded={first}, entries=5, entry_size=10)
    cluster.add_cursor(topic, "sub-a", cursor_ledger, mark_delete=(current, 2))
    cluster.add_schema(schema_id_for_topic(topic), [schema_old, schema_new])
    cluster.add_compacted_ledger(topic, compacted)

    response = httpx.get(url(stack.pulsar_admin_url, topic, "internalStats"), params={"metadata": "false"})

    assert response.status_code == 200
    stats = response.json()
    assert stats["ledgers"] == [
        {"ledgerId": first, "entries": 5, "size": 50, "offloaded": True, "underReplicated": False},
        {"ledgerId": current, "entries": 5, "size": 50, "offloaded": False, "underReplicated": False},
    ]
    assert stats["numberOfEntries"] == 10 and stats["totalSize"] == 100
    assert stats["lastConfirmedEntry"] == f"{current}:4"
    assert stats["state"] == "LedgerOpened"
    sub = stats["cursors"]["sub-a"]
    assert sub["cursorLedger"] == cursor_ledger
    assert sub["markDeletePosition"] == f"{current}:2" and sub["readPosition"] == f"{current}:3"
    assert sub["state"] == "Open" and sub["properties"] == {}
    assert isinstance(sub["cursorLedgerLastEntry"], int)
    assert stats["cursors"]["__compaction"]["properties"] == {"CompactedTopicLedger": compacted}
    assert [s["ledgerId"] for s in stats["schemaLedgers"]] == [schema_old, schema_new]
    assert stats["schemaLedgers"][0]["entries"] == 1  # from the BK metadata: lastEntryId 0
    assert stats["compactedLedger"] == {"ledgerId": compacted, "entries": 10, "size": 4096}
    # The product's reading of this body finds every kind of reference.
    assert ledgers_in_use(stats) == {
        first: "ledgers",
        current: "ledgers",
        cursor_ledger: "cursor:sub-a",
        schema_old: "schema",
        schema_new: "schema",
        compacted: "compacted",
    }


def test_internal_stats_without_compaction_or_schema(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(0)
    (only,) = cluster.new_ledger_ids(1)
    cluster.create_topic(topic, [only], compression="ZSTD")  # compressed ManagedLedgerInfo reads the same

    stats = httpx.get(url(stack.pulsar_admin_url, topic, "internalStats")).json()

    assert stats["compactedLedger"] == {"ledgerId": -1, "entries": -1, "size": -1}
    assert stats["schemaLedgers"] == []
    assert stats["cursors"] == {}
    assert [ledger["ledgerId"] for ledger in stats["ledgers"]] == [only]


def test_schema_ledgers_skip_ledgers_without_bk_metadata(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str], zk: Any
) -> None:
    topic = topic_owned_by(0)
    ledger, kept, gone = cluster.new_ledger_ids(3)
    cluster.create_topic(topic, [ledger])
    cluster.add_schema(schema_id_for_topic(topic), [gone, kept])
    zk.delete(ledger_path(gone))

    stats = httpx.get(url(stack.pulsar_admin_url, topic, "internalStats")).json()

    # As the broker: a schema ledger whose metadata is gone (BKNoSuchLedgerExists) is left out.
    assert [s["ledgerId"] for s in stats["schemaLedgers"]] == [kept]


def test_non_owner_redirects_to_owner(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(1)
    (ledger,) = cluster.new_ledger_ids(1)
    cluster.create_topic(topic, [ledger])

    first = httpx.get(
        url(stack.pulsar_admin_url, topic, "internalStats"),
        params={"authoritative": "false", "metadata": "false"},
    )

    assert first.status_code == 307
    location = urlsplit(first.headers["location"])
    assert f"{location.scheme}://{location.netloc}" == stack.pulsar_admin_owner_url
    assert location.path == topic_path(topic) + "/internalStats"
    assert parse_qs(location.query) == {"authoritative": ["true"], "metadata": ["false"]}
    followed = httpx.get(first.headers["location"])
    assert followed.status_code == 200
    assert [ledger_["ledgerId"] for ledger_ in followed.json()["ledgers"]] == [ledger]
    # The owner answers directly; the product client lands there too.
    assert httpx.get(url(stack.pulsar_admin_owner_url, topic, "internalStats")).status_code == 200
    settings = stack.settings()
    client = PulsarAdminClient(stack.pulsar_admin_url, trusted_hosts=settings.admin_trusted_host_set)
    try:
        answer = client.internal_stats(topic)
    finally:
        client.close()
    assert answer.found and answer.served_by == stack.pulsar_admin_owner_url


def test_connections_are_kept_alive(stack: StackEndpoints) -> None:
    """A broker (Jetty) keeps HTTP/1.1 connections open between requests; a server that closes them makes
    every admin call pay a new connection on both sides."""
    for base in (stack.pulsar_admin_url, stack.pulsar_admin_owner_url):
        parts = urlsplit(base)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        sockets = []
        for _ in range(3):
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            assert response.status == 200
            assert response.getheader("Connection") != "close"
            sockets.append(connection.sock)  # http.client drops the socket when the server closes it
        connection.close()
        assert sockets[0] is not None
        assert all(sock is sockets[0] for sock in sockets)


def test_many_idle_connections_are_kept_alive(stack: StackEndpoints) -> None:
    """The pulsar pool keeps one connection per activity thread (64 by default) open at once. A broker keeps
    them all; cheroot by default kept 10 and closed the rest after their first response."""
    parts = urlsplit(stack.pulsar_admin_url)
    connections = [
        http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10) for _ in range(30)
    ]
    try:
        for round_ in range(2):
            for index, connection in enumerate(connections):  # one at a time: the others wait idle
                connection.request("GET", "/health")
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                assert response.getheader("Connection") != "close", f"round {round_}, connection {index}"
    finally:
        for connection in connections:
            connection.close()


def test_owner_of_a_topic_is_stable_and_covers_both_brokers() -> None:
    owners = {owner_index(f"public/default/t-{i}") for i in range(50)}
    assert owners == {0, 1}
    assert owner_index("public/default/x") == owner_index("persistent://public/default/x")


def test_partitions(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    base = topic_owned_by(0)
    cluster.create_partitioned_topic(base, 4)
    (ledger,) = cluster.new_ledger_ids(1)
    cluster.create_topic(f"{base}-partition-5", [ledger], partitions_of=base)  # grows the metadata to 6

    assert httpx.get(url(stack.pulsar_admin_url, base, "partitions")).json() == {"partitions": 6}
    client = PulsarAdminClient(stack.pulsar_admin_url)
    try:
        assert client.partitions(base) == 6
        assert client.partitions(f"{base}-partition-5") == 0
    finally:
        client.close()


def test_encoded_local_name_reaches_the_managed_ledger(
    stack: StackEndpoints, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(0) + "%3Aorders"  # local name "…:orders" in its encoded (managed-ledger) form
    (ledger,) = cluster.new_ledger_ids(1)
    cluster.create_topic(topic, [ledger])

    response = httpx.get(url(stack.pulsar_admin_url, topic, "internal-info"))

    assert response.status_code == 200
    assert [ledger_["ledgerId"] for ledger_ in response.json()["ledgers"]] == [ledger]


def test_token_required_on_every_request(
    secured: AdminEmulator, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(0)
    for base in secured.urls:
        assert httpx.get(f"{base}/health").status_code == 401
        assert httpx.get(url(base, topic, "internal-info")).status_code == 401
        wrong = httpx.get(url(base, topic, "partitions"), headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = httpx.get(url(base, topic, "partitions"), headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 404  # let in: the topic does not exist (Pulsar's 404, not a 401)
        assert right.json()["reason"].endswith("not found")


def test_token_survives_the_redirect_only_with_the_product_client(
    secured: AdminEmulator, cluster: SimulatedCluster, topic_owned_by: Callable[[int], str]
) -> None:
    topic = topic_owned_by(1)
    (ledger,) = cluster.new_ledger_ids(1)
    cluster.create_topic(topic, [ledger])
    broker_a, broker_b = secured.urls
    auth = {"Authorization": f"Bearer {TOKEN}"}

    # A generic client drops Authorization when the redirect changes the port: the owner says 401.
    naive = httpx.get(url(broker_a, topic, "internalStats"), headers=auth, follow_redirects=True)
    assert naive.history and naive.history[0].status_code == 307
    assert naive.status_code == 401

    # The owner is one of the brokers the cluster lists (asked with the token, as the owner is).
    client = PulsarAdminClient(broker_a, token=TOKEN, cluster="standalone")
    try:
        answer = client.internal_stats(topic)
    finally:
        client.close()
    assert answer.found and answer.served_by == broker_b
    assert [ledger_["ledgerId"] for ledger_ in answer.body["ledgers"]] == [ledger]

    tokenless = PulsarAdminClient(broker_a, cluster="standalone")
    try:
        with pytest.raises(AuthorizationError):
            tokenless.internal_stats(topic)
    finally:
        tokenless.close()
