"""The simulated cluster writes what a broker and BookKeeper would, and trims like PIP-186's mark phase."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.formats.bk_metadata import parse_ledger_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

pytestmark = pytest.mark.stack


def fresh_topic() -> str:
    return f"public/default/cluster-test-{uuid.uuid4().hex[:10]}"


def custom(zk: Any, ledger_id: int) -> dict[str, str | None]:
    data, _ = zk.get(ledger_path(ledger_id))
    md = parse_ledger_metadata(data)
    return {key: md.custom(key) for key in md.custom_metadata}


def test_new_ledger_ids_are_unique(cluster: SimulatedCluster) -> None:
    ids = cluster.new_ledger_ids(5) + cluster.new_ledger_ids(5)
    assert len(set(ids)) == 10


def test_topic_ledgers_carry_pulsar_tags_and_offloaded_objects_exist(
    cluster: SimulatedCluster, zk: Any, stack: StackEndpoints
) -> None:
    topic = fresh_topic()
    classic, streamed, current = cluster.new_ledger_ids(3)
    created = cluster.create_topic(
        topic, [classic, streamed, current], offloaded={classic}, segments={streamed: 2}, metadata_version=2
    )

    ml_name = created.managed_ledger_name
    assert ml_name == topic.replace("/default/", "/default/persistent/")
    for ledger_id in (classic, streamed, current):
        assert custom(zk, ledger_id) == {
            "application": "pulsar",
            "component": "managed-ledger",
            "pulsar/managed-ledger": ml_name,
        }
    classic_keys = cluster.offload_keys(topic, classic)
    assert [key for _, key in classic_keys][0].endswith(f"-ledger-{classic}")
    assert len(cluster.offload_keys(topic, streamed)) == 4  # two segments, data + index each
    assert cluster.offload_keys(topic, current) == []
    for bucket, key in classic_keys + cluster.offload_keys(topic, streamed):
        assert bucket == stack.offload_bucket
        assert cluster.object_exists(key, bucket)
    driver = created.ledgers[classic].offload_context.driver_metadata  # type: ignore[union-attr]
    assert driver is not None and driver.name == "aws-s3"
    assert driver.properties["bucket"] == stack.offload_bucket
    assert driver.properties["serviceEndpoint"] == stack.s3_endpoint


def test_cursor_schema_compacted_and_foreign_ledgers(cluster: SimulatedCluster, zk: Any) -> None:
    topic = fresh_topic()
    ledger, cursor_ledger, schema_ledger, compacted, foreign, untagged = cluster.new_ledger_ids(6)
    cluster.create_topic(topic, [ledger])
    cluster.add_cursor(topic, "sub-a", cursor_ledger)
    cluster.add_schema(topic, [schema_ledger])
    cluster.add_compacted_ledger(topic, compacted)
    cluster.add_foreign_ledger(foreign)
    cluster.add_foreign_ledger(untagged, application=None)

    ml_name = topic.replace("/default/", "/default/persistent/")
    assert custom(zk, cursor_ledger)["pulsar/cursor"] == "sub-a"
    assert custom(zk, cursor_ledger)["pulsar/managed-ledger"] == ml_name
    assert custom(zk, schema_ledger) == {
        "application": "pulsar",
        "component": "schema",
        "pulsar/schemaId": topic,
    }
    tags = custom(zk, compacted)
    assert tags["component"] == "compacted-ledger"
    assert tags["pulsar/compactedTopic"] == f"persistent://{topic}"
    assert custom(zk, foreign) == {"application": "distributedlog"}
    assert custom(zk, untagged) == {}
    cursor = cluster.cursor_info(topic, "sub-a")
    assert cursor is not None and cursor.cursorsLedgerId == cursor_ledger
    compaction = cluster.cursor_info(topic, "__compaction")
    assert compaction is not None
    assert {p.name: p.value for p in compaction.properties} == {"CompactedTopicLedger": compacted}


def test_trim_publishes_before_the_metadata_update_and_deletes_nothing(cluster: SimulatedCluster) -> None:
    topic = fresh_topic()
    offloaded, plain, current = cluster.new_ledger_ids(3)
    cluster.create_topic(topic, [offloaded, plain, current], offloaded={offloaded})
    published: list[tuple[PendingDeleteLedgerInfo, list[int]]] = []

    def publish(request: PendingDeleteLedgerInfo) -> None:
        info = cluster.managed_ledger_info(topic)
        assert info is not None
        published.append((request, [li.ledgerId for li in info.ledgerInfo]))

    requests = cluster.trim(topic, [offloaded, plain], publish)

    assert [(r.ledger_type, r.ledger_id) for r in requests] == [
        (LedgerType.LEDGER, offloaded),
        (LedgerType.OFFLOAD_LEDGER, offloaded),
        (LedgerType.LEDGER, plain),
    ]
    assert all(
        r.ledger_component is LedgerComponent.MANAGED_LEDGER and r.topic_name == topic for r in requests
    )
    # Every request went out while the ledgers were still listed (publish first, then update).
    assert all(listed == [offloaded, plain, current] for _, listed in published)
    info = cluster.managed_ledger_info(topic)
    assert info is not None and [li.ledgerId for li in info.ledgerInfo] == [current]
    offload_request = requests[1]
    assert offload_request.context is not None and offload_request.context.offload_context is not None
    assert cluster.ledger_exists(offloaded) and cluster.ledger_exists(plain)
    assert all(cluster.object_exists(key, bucket) for bucket, key in cluster.offload_keys(topic, offloaded))


def test_bookkeeper_deleted_ledger_gets_only_an_offload_request(
    cluster: SimulatedCluster, new_ledger_id: Any
) -> None:
    topic = fresh_topic()
    # Not from the stack's id generator: test_demo_own_state plants ledgers at the ids it hands out next, and
    # this one must be a ledger nobody wrote.
    gone_from_bk, current = new_ledger_id(), new_ledger_id()
    cluster.create_topic(
        topic, [gone_from_bk, current], offloaded={gone_from_bk}, bookkeeper_deleted={gone_from_bk}
    )

    requests = cluster.requests_for_trim(topic, [gone_from_bk])

    assert [r.ledger_type for r in requests] == [LedgerType.OFFLOAD_LEDGER]
    assert not cluster.ledger_exists(gone_from_bk)


def test_delete_topic_leaves_orphans(cluster: SimulatedCluster) -> None:
    topic = fresh_topic()
    offloaded, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [offloaded, current], offloaded={offloaded})
    cluster.add_cursor(topic, "sub-a")

    cluster.delete_topic(topic)

    assert cluster.managed_ledger_info(topic) is None
    assert cluster.cursor_info(topic, "sub-a") is None
    assert cluster.ledger_exists(offloaded) and cluster.ledger_exists(current)
    keys = cluster.offload_keys(topic, offloaded)  # still known to the cluster that wrote them
    assert keys and all(cluster.object_exists(key, bucket) for bucket, key in keys)


def test_cleanup_removes_only_what_it_wrote(make_cluster: Callable[..., SimulatedCluster]) -> None:
    mine, theirs = make_cluster(), make_cluster()
    topic_mine, topic_theirs = fresh_topic(), fresh_topic()
    (a, b) = mine.new_ledger_ids(2)
    mine.create_topic(topic_mine, [a], offloaded={a})
    theirs.create_topic(topic_theirs, [b])
    keys = mine.offload_keys(topic_mine, a)

    mine.cleanup()

    assert not mine.ledger_exists(a) and mine.managed_ledger_info(topic_mine) is None
    assert not any(mine.object_exists(key, bucket) for bucket, key in keys)
    assert theirs.ledger_exists(b) and theirs.managed_ledger_info(topic_theirs) is not None
    theirs.cleanup()
