"""Activities and adapters against the real services of the embedded stack (ZooKeeper, S3, admin emulator)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.bookkeeper import BookKeeperDeleteActivities, BookKeeperReadActivities
from activities.offload import OffloadActivities
from activities.pulsar_admin import PulsarAdminActivities
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.adapters.zookeeper import LedgerStore, PulsarMetadataStore
from ledger_deletion.contracts import (
    AskOwnerBrokerInput,
    CheckTopicInput,
    DeleteBkLedgerInput,
    DeleteBkLedgerStatus,
    DeleteOffloadInput,
    OffloadSupersededInput,
    Outcome,
    Verdict,
    VerifyBkMetadataInput,
)
from ledger_deletion.errors import BucketNotFound, ConfigurationError, RedirectRefused
from ledger_deletion.formats import managed_ledger as ml
from ledger_deletion.formats.bk_metadata import (
    build_pulsar_ledger_metadata,
    cursor_custom_metadata,
    managed_ledger_custom_metadata,
    schema_custom_metadata,
)
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import ledger_list_digest
from ledger_deletion.formats.offload_keys import ledger_object_keys, offload_uuid, segment_object_keys
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    OffloadSegment,
    PendingDeleteLedgerInfo,
)

pytestmark = pytest.mark.stack

TOPIC = "acts/ns1/orders-partition-0"
ML_NAME = "acts/ns1/persistent/orders-partition-0"


def request(
    ledger_id: int, component: LedgerComponent = LedgerComponent.MANAGED_LEDGER, **kw: Any
) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        topic_name=kw.pop("topic_name", TOPIC),
        ledger_component=component,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id,
        **kw,
    )


@dataclass(frozen=True)
class BookKeeperSteps:
    """The bookkeeper steps on one store as the pools hold them: the reads (the workflow pool's checks) and
    the delete (the bookkeeper pool's)."""

    reads: BookKeeperReadActivities
    deletes: BookKeeperDeleteActivities

    @staticmethod
    def of(store: LedgerStore, pulsar_metadata: PulsarMetadataStore) -> BookKeeperSteps:
        return BookKeeperSteps(
            BookKeeperReadActivities(store, pulsar_metadata), BookKeeperDeleteActivities(store)
        )


@pytest.fixture(scope="module")
def bk(stack: StackEndpoints, zk: KazooClient) -> Any:
    # Pulsar's metadata store, as in a cluster that has stored a schema: it has /schemas (without it, the
    # store is not Pulsar's and a schema ledger's check fails: test_a_store_without_schemas_...).
    zk.ensure_path("/schemas")
    zk.ensure_path("/managed-ledgers")  # and has topics (test_a_store_without_managed_ledgers_...)
    store, pulsar_metadata = LedgerStore(stack.zookeeper), PulsarMetadataStore(stack.zookeeper)
    yield BookKeeperSteps.of(store, pulsar_metadata)
    store.close()
    pulsar_metadata.close()


def put_ledger(zk: KazooClient, ledger_id: int, custom: dict[str, str], version: int = 3) -> str:
    path = ledger_path(ledger_id)
    zk.create(path, build_pulsar_ledger_metadata(custom, format_version=version), makepath=True)
    return path


def verify(bk: BookKeeperSteps, req: PendingDeleteLedgerInfo) -> Any:
    return ActivityEnvironment().run(bk.reads.verify_bk_metadata, VerifyBkMetadataInput(req))


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("long_id", [False, True])
async def test_data_ledger_verified_and_compare_and_deleted(bk, zk, new_ledger_id, version, long_id) -> None:
    ledger_id = new_ledger_id(long=long_id)
    path = put_ledger(zk, ledger_id, managed_ledger_custom_metadata(ML_NAME), version)
    assert path.count("/") == (6 if long_id else 4)
    verified = verify(bk, request(ledger_id))
    assert verified.verdict is Verdict.MATCH and verified.metadata_format_version == version
    env = ActivityEnvironment()
    result = env.run(bk.deletes.delete_bk_ledger, DeleteBkLedgerInput(ledger_id, verified.znode_version))
    assert result.status is DeleteBkLedgerStatus.DELETED
    assert zk.exists(path) is None
    assert zk.exists(path.rsplit("/", 1)[0]) is None or zk.get_children(
        path.rsplit("/", 1)[0]
    )  # empty parent pruned
    again = env.run(bk.deletes.delete_bk_ledger, DeleteBkLedgerInput(ledger_id, verified.znode_version))
    assert again.status is DeleteBkLedgerStatus.ALREADY_DELETED
    assert (verify(bk, request(ledger_id))).verdict is Verdict.NOT_FOUND


async def test_a_lost_connection_while_pruning_parents_does_not_fail_the_delete(
    stack, zk, new_ledger_id
) -> None:
    """The ledger is gone once its znode is: a connection lost while removing the empty parents after it
    used to fail the activity, whose retry then found no znode and reported "already deleted"."""
    ledger_id = new_ledger_id()
    path = put_ledger(zk, ledger_id, managed_ledger_custom_metadata(ML_NAME))
    store = LedgerStore(stack.zookeeper)
    bk = BookKeeperSteps.of(store, PulsarMetadataStore(stack.zookeeper))
    verified = verify(bk, request(ledger_id))
    client = store._zk()
    delete = client.delete

    def connection_lost_on_parents(node: str, version: int = -1, recursive: bool = False) -> Any:
        if node != path:
            raise ConnectionLoss()
        return delete(node, version=version, recursive=recursive)

    client.delete = connection_lost_on_parents
    try:
        result = ActivityEnvironment().run(
            bk.deletes.delete_bk_ledger, DeleteBkLedgerInput(ledger_id, verified.znode_version)
        )
    finally:
        store.close()
    assert result.status is DeleteBkLedgerStatus.DELETED and zk.exists(path) is None


async def test_a_retried_delete_that_finds_its_znode_gone_says_so(bk, zk, new_ledger_id) -> None:
    """The znode disappears after a first attempt failed: that attempt's delete or someone else removed it,
    and nothing tells which. The retry says GONE_ON_RETRY, not DELETED. A first attempt that finds nothing
    says ALREADY_DELETED."""
    ledger_id = new_ledger_id()
    put_ledger(zk, ledger_id, managed_ledger_custom_metadata(ML_NAME))
    verified = verify(bk, request(ledger_id))
    zk.delete(ledger_path(ledger_id))  # what the first attempt's delete did before its reply was lost
    env = ActivityEnvironment()
    first = env.run(bk.deletes.delete_bk_ledger, DeleteBkLedgerInput(ledger_id, verified.znode_version))
    assert first.status is DeleteBkLedgerStatus.ALREADY_DELETED
    env.info = replace(env.info, attempt=2)
    retried = env.run(bk.deletes.delete_bk_ledger, DeleteBkLedgerInput(ledger_id, verified.znode_version))
    assert retried.status is DeleteBkLedgerStatus.GONE_ON_RETRY


async def test_changed_znode_is_not_deleted(bk, zk, new_ledger_id) -> None:
    ledger_id = new_ledger_id()
    path = put_ledger(zk, ledger_id, managed_ledger_custom_metadata(ML_NAME))
    verified = verify(bk, request(ledger_id))
    zk.set(path, zk.get(path)[0])  # any write bumps the version
    result = ActivityEnvironment().run(
        bk.deletes.delete_bk_ledger, DeleteBkLedgerInput(ledger_id, verified.znode_version)
    )
    assert result.status is DeleteBkLedgerStatus.VERSION_CHANGED
    assert zk.exists(path) is not None


@pytest.mark.parametrize(
    ("custom", "req_kwargs", "verdict"),
    [
        (managed_ledger_custom_metadata("acts/ns1/persistent/other-topic"), {}, Verdict.MISMATCH),
        (cursor_custom_metadata(ML_NAME, "sub-a"), {}, Verdict.MISMATCH),  # cursor ledger claimed as data
        (
            cursor_custom_metadata(ML_NAME, "sub-a"),
            {"component": LedgerComponent.MANAGED_CURSOR, "cursor_name": "sub-b"},
            Verdict.MISMATCH,
        ),
        (
            cursor_custom_metadata(ML_NAME, "sub-a"),
            {"component": LedgerComponent.MANAGED_CURSOR, "cursor_name": "sub-a"},
            Verdict.MATCH,
        ),
        (
            schema_custom_metadata("acts/ns1/other"),
            {"component": LedgerComponent.SCHEMA_STORAGE, "schema_id": "acts/ns1/orders"},
            Verdict.MISMATCH,
        ),
        (
            schema_custom_metadata("acts/ns1/orders"),
            {"component": LedgerComponent.SCHEMA_STORAGE, "schema_id": "acts/ns1/orders"},
            Verdict.MATCH,
        ),
        ({"application": "distributedlog", "component": "managed-ledger"}, {}, Verdict.NOT_PULSAR),
        ({}, {}, Verdict.MISMATCH),  # no tags at all: ownership cannot be proven
    ],
)
async def test_metadata_must_match_the_request(bk, zk, new_ledger_id, custom, req_kwargs, verdict) -> None:
    ledger_id = new_ledger_id()
    put_ledger(zk, ledger_id, custom)
    component = req_kwargs.pop("component", LedgerComponent.MANAGED_LEDGER)
    assert (verify(bk, request(ledger_id, component, **req_kwargs))).verdict is verdict


def put_schema_locator(zk: KazooClient, schema_id: str, ledger_ids: list[int], root: str = "") -> None:
    locator = ml.SchemaLocator()
    for version, ledger_id in enumerate(ledger_ids):
        entry = locator.index.add(version=version, hash=b"h")
        entry.position.ledgerId, entry.position.entryId = ledger_id, 0
    locator.info.CopyFrom(entry)
    data = ml.serialize_schema_locator(locator)
    path = f"{root}/schemas/{schema_id}"
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, makepath=True)


async def test_schema_ledger_listed_by_its_locator_is_reported_referenced(bk, zk, new_ledger_id) -> None:
    """The schema registry's locator is read from ZooKeeper: a listed ledger is in use, topic or no topic."""
    schema_id = f"acts/ns1/schema-{uuid.uuid4().hex[:8]}"
    listed, other = new_ledger_id(), new_ledger_id()
    for ledger_id in (listed, other):
        put_ledger(zk, ledger_id, schema_custom_metadata(schema_id))
    req = request(listed, LedgerComponent.SCHEMA_STORAGE, topic_name=schema_id, schema_id=schema_id)

    zk.ensure_path("/schemas")  # Pulsar's schema root: this store holds schemas
    assert verify(bk, req).schema_referenced is False  # no locator: the schema is gone
    put_schema_locator(zk, schema_id, [other, listed])
    result = verify(bk, req)
    assert (result.verdict, result.schema_referenced) == (Verdict.MATCH, True)
    assert schema_id in result.reason
    put_schema_locator(zk, schema_id, [other])  # the broker dropped the version
    assert verify(bk, req).schema_referenced is False
    zk.set(f"/schemas/{schema_id}", b"\xff\x01")  # unreadable: it may still list the ledger
    result = verify(bk, req)
    assert result.schema_referenced is True and "unreadable" in result.reason


async def test_schema_locators_are_read_from_pulsars_own_metadata_store(stack, zk, new_ledger_id) -> None:
    """Pulsar's metadata apart from BookKeeper's (a chroot here): its locator is read there, not in BK's."""
    pulsar_root = f"/pulsar-metadata-{uuid.uuid4().hex[:8]}"
    schema_id = f"acts/ns1/split-{uuid.uuid4().hex[:8]}"
    listed = new_ledger_id()
    put_ledger(zk, listed, schema_custom_metadata(schema_id))
    zk.ensure_path("/schemas")  # BookKeeper's ZooKeeper has schemas of its own, none for this one
    put_schema_locator(zk, schema_id, [listed], root=pulsar_root)
    req = request(listed, LedgerComponent.SCHEMA_STORAGE, topic_name=schema_id, schema_id=schema_id)
    store, pulsar_metadata = LedgerStore(stack.zookeeper), PulsarMetadataStore(stack.zookeeper + pulsar_root)
    try:
        result = verify(BookKeeperSteps.of(store, pulsar_metadata), req)
    finally:
        store.close()
        pulsar_metadata.close()
    assert (result.verdict, result.schema_referenced) == (Verdict.MATCH, True)


async def test_a_store_without_schemas_is_not_read_as_no_locator(stack, zk, new_ledger_id) -> None:
    """A schema ledger exists, so Pulsar's store has /schemas: one without it is the wrong store. Retried."""
    empty_root = f"/not-pulsar-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(empty_root)
    schema_id = f"acts/ns1/lost-{uuid.uuid4().hex[:8]}"
    ledger_id = new_ledger_id()
    put_ledger(zk, ledger_id, schema_custom_metadata(schema_id))
    req = request(ledger_id, LedgerComponent.SCHEMA_STORAGE, topic_name=schema_id, schema_id=schema_id)
    store, wrong_store = LedgerStore(stack.zookeeper), PulsarMetadataStore(stack.zookeeper + empty_root)
    try:
        with pytest.raises(ApplicationError) as failure:
            verify(BookKeeperSteps.of(store, wrong_store), req)
    finally:
        store.close()
        wrong_store.close()
    assert failure.value.type == "PulsarMetadataNotFound" and not failure.value.non_retryable
    assert "LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER" in str(failure.value)
    assert zk.exists(ledger_path(ledger_id)) is not None


async def test_a_ledger_pulsars_metadata_store_still_lists_is_reported_listed(bk, zk, new_ledger_id) -> None:
    """The owner broker answers from memory, which a trim updates before the store: verify reads the store,
    the managed ledger's ledger list for a data ledger, its cursor's ``cursorsLedgerId`` for a cursor's."""
    ml_name = f"acts/ns-{uuid.uuid4().hex[:6]}/persistent/trimmed"
    topic = ml.topic_name_from_managed_ledger(ml_name)
    listed, trimmed, cursor_ledger, old_cursor_ledger = (new_ledger_id() for _ in range(4))
    for ledger_id in (listed, trimmed):
        put_ledger(zk, ledger_id, managed_ledger_custom_metadata(ml_name))
    for ledger_id in (cursor_ledger, old_cursor_ledger):
        put_ledger(zk, ledger_id, cursor_custom_metadata(ml_name, "sub"))
    data = request(listed, topic_name=topic)
    assert verify(bk, data).metadata_store_listing == ""  # no managed ledger (its topic is gone)

    info = ml.ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=listed)
    zk.create(f"/managed-ledgers/{ml_name}", ml.serialize_managed_ledger_info(info), makepath=True)
    result = verify(bk, data)
    assert result.verdict is Verdict.MATCH and ml_name in result.metadata_store_listing
    assert verify(bk, request(trimmed, topic_name=topic)).metadata_store_listing == ""

    cursor = ml.ManagedCursorInfo(cursorsLedgerId=cursor_ledger)
    zk.create(f"/managed-ledgers/{ml_name}/sub", ml.serialize_managed_cursor_info(cursor))
    cursor_request = request(
        cursor_ledger, LedgerComponent.MANAGED_CURSOR, topic_name=topic, cursor_name="sub"
    )
    assert "cursor sub" in verify(bk, cursor_request).metadata_store_listing
    switched = replace(cursor_request, ledger_id=old_cursor_ledger)  # the cursor moved to a new ledger
    assert verify(bk, switched).metadata_store_listing == ""

    zk.set(f"/managed-ledgers/{ml_name}", b"\xff\x01")  # unreadable: it may still list the ledger
    assert "unreadable" in verify(bk, request(trimmed, topic_name=topic)).metadata_store_listing


async def test_a_store_without_managed_ledgers_is_not_read_as_not_listed(stack, zk, new_ledger_id) -> None:
    """A store without /managed-ledgers is not Pulsar's: "no managed ledger" there proves nothing. Retried."""
    empty_root = f"/not-pulsar-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(empty_root)
    ledger_id = new_ledger_id()
    put_ledger(zk, ledger_id, managed_ledger_custom_metadata(ML_NAME))
    store, wrong_store = LedgerStore(stack.zookeeper), PulsarMetadataStore(stack.zookeeper + empty_root)
    try:
        with pytest.raises(ApplicationError) as failure:
            verify(BookKeeperSteps.of(store, wrong_store), request(ledger_id))
    finally:
        store.close()
        wrong_store.close()
    assert failure.value.type == "PulsarMetadataNotFound" and not failure.value.non_retryable


async def test_a_released_bk_copy_is_read_from_the_managed_ledger(cluster: SimulatedCluster, bk, zk) -> None:
    """Asked whether the broker released an offloaded ledger's BookKeeper copy, verify reads the ledger's
    entry in its ManagedLedgerInfo: complete and ``bookkeeperDeleted`` only."""
    released, within_lag, current = cluster.new_ledger_ids(3)
    topic = cluster.create_topic(
        f"acts/ns-{uuid.uuid4().hex[:6]}/offloaded",
        [released, within_lag, current],
        offloaded=[released, within_lag],
        bookkeeper_deleted=[released],
        bk_copy_left=[released],
    )

    owner = ledger_list_digest([released, within_lag, current])  # what its owner broker lists

    def ask(ledger_id: int, owner_digest: str = owner) -> Any:
        req = request(ledger_id, topic_name=topic.name)
        return ActivityEnvironment().run(
            bk.reads.verify_bk_metadata, VerifyBkMetadataInput(req, True, owner_digest)
        )

    answer = ask(released)
    assert (answer.verdict, answer.bk_copy_released) == (Verdict.MATCH, True)
    assert "released its BookKeeper copy" in answer.reason
    # A store listing other ledgers than the owner (another cluster's copy, a snapshot), or an owner's
    # answer without the list's fingerprint (a pulsar pool older than the comparison): kept.
    answer = ask(released, owner_digest=ledger_list_digest([released, current]))
    assert answer.bk_copy_released is False and "other ledgers" in answer.reason
    assert ask(released, owner_digest="").bk_copy_released is False
    assert ask(within_lag).bk_copy_released is False
    assert ask(current).bk_copy_released is False
    assert verify(bk, request(released, topic_name=topic.name)).bk_copy_released is False  # not asked
    zk.set(f"/managed-ledgers/{topic.managed_ledger_name}", b"\xff\x01 not protobuf")
    answer = ask(released)
    assert answer.bk_copy_released is False and "unreadable" in answer.reason


async def test_a_replaced_offload_attempt_is_read_from_the_managed_ledger(
    cluster: SimulatedCluster, bk, zk
) -> None:
    """Asked whether an offload request's uuid was replaced, the activity compares it with the uuid the
    ledger's ManagedLedgerInfo stores: another classic uuid only; the same one, none, a data request or
    unreadable metadata keep the objects."""
    reoffloaded, offloaded, current = cluster.new_ledger_ids(3)
    topic = cluster.create_topic(
        f"acts/ns-{uuid.uuid4().hex[:6]}/reoffloaded",
        [reoffloaded, offloaded, current],
        offloaded=[reoffloaded, offloaded],
        offload_failed=[reoffloaded],
    )
    replaced = cluster.replace_offload(topic.name, reoffloaded)
    stored = {
        r.ledger_id: r
        for r in cluster.requests_for_trim(topic.name, [reoffloaded, offloaded])
        if r.context and r.ledger_type is LedgerType.OFFLOAD_LEDGER
    }

    owner = ledger_list_digest([reoffloaded, offloaded, current])  # what its owner broker lists

    def ask(req: PendingDeleteLedgerInfo, owner_digest: str = owner) -> Any:
        return ActivityEnvironment().run(
            bk.reads.check_offload_superseded, OffloadSupersededInput(req, owner_digest)
        )

    answer = ask(replaced)
    assert answer.superseded is True and "replaced" in answer.reason
    assert ask(replaced, owner_digest="").superseded is False  # an owner answer without the fingerprint
    assert ask(stored[reoffloaded]).superseded is False  # the uuid it stores now
    assert ask(stored[offloaded]).superseded is False
    assert ask(replace(stored[offloaded], ledger_type=LedgerType.LEDGER)).superseded is False
    assert ask(replace(replaced, topic_name=f"{topic.name}-gone")).superseded is False  # no managed ledger
    # A store whose list is not the owner's (another cluster's copy, a snapshot, a rollover in between).
    answer = ask(replaced, owner_digest=ledger_list_digest([reoffloaded, current]))
    assert answer.superseded is False and "other ledgers" in answer.reason
    # Pulsar never replaces a complete offload: such a request is never taken as a replaced attempt.
    assert replaced.context is not None and replaced.context.offload_context is not None
    done = replace(replaced.context.offload_context, complete=True)
    completed = replace(replaced, context=replace(replaced.context, offload_context=done))
    assert ask(completed).superseded is False
    # Damaged metadata listing the ledger twice, once under the requested uuid: that one may be read.
    path = f"/managed-ledgers/{topic.managed_ledger_name}"
    info = ml.parse_managed_ledger_info(zk.get(path)[0])
    twice = info.ledgerInfo.add()
    twice.CopyFrom(next(e for e in info.ledgerInfo if e.ledgerId == reoffloaded))
    twice.offloadContext.uidMsb, twice.offloadContext.uidLsb = (
        replaced.context.offload_context.uid_msb,
        replaced.context.offload_context.uid_lsb,
    )
    zk.set(path, ml.serialize_managed_ledger_info(info))
    assert ask(replaced).superseded is False
    zk.set(path, b"\xff\x01 not protobuf")
    answer = ask(replaced)
    assert answer.superseded is False and "unreadable" in answer.reason


async def test_unreadable_metadata_is_a_mismatch(bk, zk, new_ledger_id) -> None:
    ledger_id = new_ledger_id()
    zk.create(ledger_path(ledger_id), b"BookieMetadataFormatVersion\t3\n\xff\xff", makepath=True)
    result = verify(bk, request(ledger_id))
    assert result.verdict is Verdict.MISMATCH and "unreadable" in result.reason


def test_store_refuses_paths_outside_its_root() -> None:
    with pytest.raises(ConfigurationError):
        LedgerStore("127.0.0.1:1", ledgers_root="/")
    store = LedgerStore("127.0.0.1:1", ledgers_root="/ledgers")
    with pytest.raises(ConfigurationError):
        store._guard("/managed-ledgers/x")


# --- offload ---------------------------------------------------------------------------------------


def offload_context(msb: int, lsb: int, bucket: str | None) -> OffloadContext:
    props = {"bucket": bucket} if bucket else {}
    return OffloadContext(
        uid_msb=msb, uid_lsb=lsb, complete=True, driver_metadata=OffloadDriverMetadata("aws-s3", props)
    )


# What BlobStoreManagedLedgerOffloader writes on every object it uploads: the broker's userMetadata plus the
# format version (DataBlockUtils#addVersionInfo). Brokers before apache/pulsar#14907 write only this.
PRE_14907_METADATA = {
    "s3managedledgeroffloadersoftwareversion": "2.9.3",
    "s3managedledgeroffloadersoftwaregitsha": "abc1234",
    "s3managedledgeroffloaderformatversion": "1",
}


def pulsar_metadata(role: str, ml_name: str = ML_NAME) -> dict[str, str]:
    """A classic offload's object metadata since apache/pulsar#14907: role and the ManagedLedgerName."""
    return {**PRE_14907_METADATA, "pulsarclustername": "acts", "role": role, "ManagedLedgerName": ml_name}


def put_offloaded(s3: Any, bucket: str, data: str, index: str, data_meta: Any, index_meta: Any) -> None:
    s3.put_object(Bucket=bucket, Key=data, Body=b"data", Metadata=data_meta)
    s3.put_object(Bucket=bucket, Key=index, Body=b"index", Metadata=index_meta)


def existing(s3: Any, bucket: str, *keys: str) -> list[str]:
    present = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    return [k for k in keys if k in present]


@pytest.fixture(scope="module")
def bucket(s3: Any) -> str:
    name = f"acts-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    return name


async def test_offloaded_objects_deleted_unrelated_untouched(stack, s3, bucket, new_ledger_id) -> None:
    ledger_id = new_ledger_id()
    msb, lsb = 0x1234, -0x5678 - ledger_id
    data, index = ledger_object_keys(offload_uuid(msb, lsb), ledger_id)
    neighbour = ledger_object_keys(offload_uuid(msb, lsb), ledger_id + 1)[0]
    put_offloaded(s3, bucket, data, index, pulsar_metadata("data"), pulsar_metadata("index"))
    for key in (neighbour, f"{data}-extra"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x", Metadata=pulsar_metadata("data"))
    activities = OffloadActivities(ObjectStore(stack.s3_endpoint), default_bucket="not-used")
    inp = DeleteOffloadInput(
        ledger_id, ML_NAME, LedgerInfo(ledger_id, offload_context=offload_context(msb, lsb, bucket))
    )
    result = ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert result.outcome is Outcome.DELETED
    assert sorted(result.deleted_keys) == sorted(f"s3://{bucket}/{k}" for k in (data, index))
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert data not in keys and index not in keys and neighbour in keys and f"{data}-extra" in keys
    again = ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert again.outcome is Outcome.ALREADY_DELETED


async def test_offloaded_objects_of_another_topic_are_not_deleted(stack, s3, bucket, new_ledger_id) -> None:
    ledger_id = new_ledger_id()
    data, index = ledger_object_keys(offload_uuid(7, ledger_id), ledger_id)
    for key in (data, index):
        s3.put_object(
            Bucket=bucket, Key=key, Body=b"x", Metadata={"ManagedLedgerName": "acts/ns1/persistent/other"}
        )
    activities = OffloadActivities(ObjectStore(stack.s3_endpoint), default_bucket=bucket)
    inp = DeleteOffloadInput(
        ledger_id, ML_NAME, LedgerInfo(ledger_id, offload_context=offload_context(7, ledger_id, None))
    )
    result = ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert result.outcome is Outcome.SKIPPED_METADATA_MISMATCH
    assert len(s3.list_objects_v2(Bucket=bucket, Prefix=data)["Contents"]) == 2


@pytest.mark.parametrize(
    ("data_meta", "index_meta", "why"),
    [
        (PRE_14907_METADATA, PRE_14907_METADATA, "no ManagedLedgerName"),
        ({}, {}, "no ManagedLedgerName"),  # not written by Pulsar at all
        (pulsar_metadata("data"), PRE_14907_METADATA, "no ManagedLedgerName"),  # one of the pair untagged
        (pulsar_metadata("index"), pulsar_metadata("data"), "has role 'index'"),  # data and index swapped
        (pulsar_metadata("data") | {"role": ""}, pulsar_metadata("index"), "has role ''"),
        ({k: v for k, v in pulsar_metadata("data").items() if k != "role"}, pulsar_metadata("index"), "None"),
    ],
)
async def test_offloaded_objects_not_proven_to_be_the_requested_ones_are_kept(
    stack, s3, bucket, new_ledger_id, data_meta, index_meta, why
) -> None:
    """A missing owner tag or a wrong role fails closed, as a missing tag on a BK ledger does."""
    ledger_id = new_ledger_id()
    data, index = ledger_object_keys(offload_uuid(11, ledger_id), ledger_id)
    put_offloaded(s3, bucket, data, index, data_meta, index_meta)
    activities = OffloadActivities(ObjectStore(stack.s3_endpoint), default_bucket=bucket)
    inp = DeleteOffloadInput(
        ledger_id, ML_NAME, LedgerInfo(ledger_id, offload_context=offload_context(11, ledger_id, None))
    )
    result = ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert result.outcome is Outcome.SKIPPED_METADATA_MISMATCH and result.deleted_keys == []
    assert why in result.reason and "nothing deleted" in result.reason
    assert existing(s3, bucket, data, index) == [data, index]


@pytest.mark.parametrize("named_by", ["driver metadata", "settings"])
async def test_a_bucket_that_is_not_there_is_an_error_not_already_deleted(
    stack, s3, new_ledger_id, named_by
) -> None:
    """NoSuchBucket (a wrong bucket in the driver metadata or in our settings, or the wrong endpoint) must not
    ack the request: BucketNotFound is raised, retried, and finally dead-lettered with the bucket named."""
    ledger_id = new_ledger_id()
    missing = f"acts-missing-{uuid.uuid4().hex[:8]}"
    in_request = named_by == "driver metadata"
    ctx = offload_context(13, ledger_id, missing if in_request else None)
    activities = OffloadActivities(
        ObjectStore(stack.s3_endpoint), default_bucket="not-used" if in_request else missing
    )
    inp = DeleteOffloadInput(ledger_id, ML_NAME, LedgerInfo(ledger_id, offload_context=ctx))
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert raised.value.type == "BucketNotFound" and not raised.value.non_retryable
    assert missing in str(raised.value) and stack.s3_endpoint in str(raised.value)


def test_delete_in_a_missing_bucket_is_bucket_not_found(stack) -> None:
    store = ObjectStore(stack.s3_endpoint)
    with pytest.raises(BucketNotFound, match="acts-nowhere"):
        store.delete(f"acts-nowhere-{uuid.uuid4().hex[:8]}", ["k"])
    with pytest.raises(BucketNotFound):
        store.require_bucket(f"acts-nowhere-{uuid.uuid4().hex[:8]}")


async def test_streaming_offload_segments_are_never_deleted_for_one_ledger(
    stack, s3, bucket, new_ledger_id
) -> None:
    """A PIP-76 segment (<uuid>, <uuid>-index) can hold entries of several ledgers: one request cannot
    show that all of them are gone, so its objects stay, whatever their metadata says."""
    ledger_id = new_ledger_id()
    seg_msb, seg_lsb = 17, ledger_id
    seg_data, seg_index = segment_object_keys(offload_uuid(seg_msb, seg_lsb))
    put_offloaded(s3, bucket, seg_data, seg_index, pulsar_metadata("data"), pulsar_metadata("index"))
    # The context's own uid (PIP-76: the uuid of the begin segment) with a classic pair: kept too.
    data, index = ledger_object_keys(offload_uuid(19, ledger_id), ledger_id)
    put_offloaded(s3, bucket, data, index, pulsar_metadata("data"), pulsar_metadata("index"))
    ctx = OffloadContext(
        uid_msb=19,
        uid_lsb=ledger_id,
        complete=True,
        driver_metadata=OffloadDriverMetadata("aws-s3", {"bucket": bucket}),
        offload_segment=[OffloadSegment(uid_msb=seg_msb, uid_lsb=seg_lsb, complete=True)],
    )
    activities = OffloadActivities(ObjectStore(stack.s3_endpoint), default_bucket=bucket)
    inp = DeleteOffloadInput(ledger_id, ML_NAME, LedgerInfo(ledger_id, offload_context=ctx))
    result = ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert result.outcome is Outcome.SKIPPED_METADATA_MISMATCH and result.deleted_keys == []
    assert "streaming-offload segment" in result.reason
    assert existing(s3, bucket, seg_data, seg_index, data, index) == [seg_data, seg_index, data, index]


# --- admin -----------------------------------------------------------------------------------------


def write_topic(zk: KazooClient, topic: str, ledgers: list[int], cursor_ledger: int | None = None) -> None:
    info = ml.ManagedLedgerInfo()
    for ledger_id in ledgers:
        info.ledgerInfo.add(ledgerId=ledger_id, entries=10, size=100, timestamp=1)
    path = f"/managed-ledgers/{ml.managed_ledger_name(topic)}"
    zk.create(path, ml.serialize_managed_ledger_info(info), makepath=True)
    if cursor_ledger is not None:
        cursor = ml.ManagedCursorInfo(
            cursorsLedgerId=cursor_ledger, markDeleteLedgerId=ledgers[0], markDeleteEntryId=0
        )
        zk.create(f"{path}/sub", ml.serialize_managed_cursor_info(cursor))


def stack_admin_client(stack: StackEndpoints) -> PulsarAdminClient:
    """The admin client as the service builds it for the stack: broker B, where 307s lead, is trusted."""
    settings = stack.settings()
    return PulsarAdminClient(settings.pulsar_admin_url, trusted_hosts=settings.admin_trusted_host_set)


def topics_owned_by_each_broker(prefix: str, suffix: str = "") -> tuple[str, str]:
    """One topic answered directly by broker A, one answered through a 307 to broker B."""
    from devstack.admin_emulator import owner_index

    names = [f"{prefix}/t{i}{suffix}" for i in range(20)]
    a = next(n for n in names if owner_index(f"persistent://{n}") == 0)
    b = next(n for n in names if owner_index(f"persistent://{n}") == 1)
    return a, b


async def test_admin_activities_follow_the_owner_redirect(stack, zk, new_ledger_id) -> None:
    namespace = f"acts/ns-{uuid.uuid4().hex[:6]}"
    local_a, remote_b = topics_owned_by_each_broker(namespace)
    l1, l2, cursor = new_ledger_id(), new_ledger_id(), new_ledger_id()
    for topic in (local_a, remote_b):
        write_topic(zk, topic, [l1, l2], cursor_ledger=cursor)
    client = stack_admin_client(stack)
    activities = PulsarAdminActivities(client)
    env = ActivityEnvironment()
    assert (env.run(activities.check_topic, CheckTopicInput(local_a))).exists
    assert not (env.run(activities.check_topic, CheckTopicInput(f"{namespace}/missing"))).exists
    for topic, owner in ((local_a, stack.pulsar_admin_url), (remote_b, stack.pulsar_admin_owner_url)):
        in_use = env.run(activities.ask_owner_broker, AskOwnerBrokerInput(topic, l2))
        assert in_use.in_use and in_use.referenced_as == "ledgers" and in_use.owner_url == owner
        # The owner's ledger list, for a ManagedLedgerInfo read elsewhere to be compared with.
        assert in_use.listed_digest == ledger_list_digest([l2, l1])
        cursor_use = env.run(activities.ask_owner_broker, AskOwnerBrokerInput(topic, cursor))
        assert cursor_use.in_use and cursor_use.referenced_as == "cursor:sub"
        assert cursor_use.listed_digest == ""  # only a listed ledger's answer carries it
        free = env.run(activities.ask_owner_broker, AskOwnerBrokerInput(topic, new_ledger_id()))
        assert not free.in_use
    gone = env.run(activities.ask_owner_broker, AskOwnerBrokerInput(f"{namespace}/missing", l1))
    assert not gone.in_use and not gone.topic_exists
    client.close()


async def test_the_owner_says_it_cannot_load_a_pending_ack_store(stack, zk, new_ledger_id) -> None:
    """A pending-ack store is a managed ledger (internal-info reads it) that no broker loads as a topic."""
    namespace = f"acts/ns-{uuid.uuid4().hex[:6]}"
    for topic in topics_owned_by_each_broker(namespace, suffix="-sub__transaction_pending_ack"):
        ledger = new_ledger_id()
        write_topic(zk, topic, [ledger])
        client = stack_admin_client(stack)
        activities = PulsarAdminActivities(client)
        env = ActivityEnvironment()
        assert env.run(activities.check_topic, CheckTopicInput(topic)).exists
        answer = env.run(activities.ask_owner_broker, AskOwnerBrokerInput(topic, ledger))
        assert (answer.owner_cannot_load, answer.in_use) == (True, True)
        client.close()


def test_token_is_not_sent_to_an_untrusted_redirect_target(stack) -> None:
    """The emulator's 307 goes to 127.0.0.1; a client configured with 'localhost' must not follow it."""
    from devstack.admin_emulator import owner_index

    topic = next(f"acts/ns/t{i}" for i in range(20) if owner_index(f"persistent://acts/ns/t{i}") == 1)
    client = PulsarAdminClient(stack.pulsar_admin_url.replace("127.0.0.1", "localhost"), token="s3cret")
    with pytest.raises(RedirectRefused, match="not a broker of"):
        client.internal_stats(topic)
    client.close()


def test_admin_body_is_the_real_shape(stack, zk, new_ledger_id) -> None:
    topic = f"acts/ns-{uuid.uuid4().hex[:6]}/shape"
    l1 = new_ledger_id()
    write_topic(zk, topic, [l1])
    client = stack_admin_client(stack)
    info = client.internal_info(topic)
    assert info.found and [x["ledgerId"] for x in info.body["ledgers"]] == [l1]
    stats = client.internal_stats(topic)
    assert stats.found and stats.body["compactedLedger"]["ledgerId"] == -1
    json.dumps(stats.body)
    client.close()
