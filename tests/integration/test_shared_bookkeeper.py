"""A BookKeeper shared by two Pulsar clusters (issue 39, section 1), on the stack's one ZooKeeper.

Cluster A is the stack's (its metadata store at the root); cluster B keeps its metadata store in a chroot of
its own and writes its ledgers into the same ``/ledgers``, as ``PulsarClusterMetadataSetup
--existing-bk-metadata-service-uri`` sets one up. B has a geo-replicated topic of the same managed-ledger
name as one of A's, with lower ledger ids, a cursor and a schema on it, and a namespace only B has.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.bookkeeper import BookKeeperDeleteActivities, BookKeeperReadActivities
from activities.offload import OffloadActivities
from devstack.cluster import SimulatedCluster, SimulatedTopic
from devstack.stack import StackEndpoints
from ledger_deletion import tripwire
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.adapters.zookeeper import LedgerReader, LedgerStore, PulsarMetadataStore
from ledger_deletion.contracts import (
    DeleteBkLedgerInput,
    DeleteBkLedgerStatus,
    DeleteOffloadInput,
    DeleteOffloadResult,
    OffloadListedInput,
    OffloadListedResult,
    Outcome,
    Verdict,
    VerifyBkMetadataInput,
)
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.observability import metrics
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools, wait_for_result

pytestmark = pytest.mark.stack

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class TwoClusters:
    a: SimulatedCluster
    b: SimulatedCluster
    b_store: str  # B's metadata store as LEDGER_DELETION_BOOKKEEPER_SHARED_WITH names it
    tenant: str
    geo_a: SimulatedTopic
    geo_b: SimulatedTopic
    b_cursor_ledger: int
    b_schema_ledger: int
    b_only: SimulatedTopic  # in a namespace only B has
    a_only: SimulatedTopic  # a topic only A has, in a namespace B has too

    def b_requests(self) -> list[PendingDeleteLedgerInfo]:
        """One request for each kind of B's ledgers: data (ids below A's newest), cursor, schema, and data of
        the namespace only B has."""
        geo = self.geo_b.name
        return [
            *(_data(geo, ledger) for ledger in self.geo_b.ledgers),
            PendingDeleteLedgerInfo(
                geo, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, self.b_cursor_ledger, "sub-b"
            ),
            PendingDeleteLedgerInfo(
                geo, LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, self.b_schema_ledger, schema_id=geo
            ),
            *(_data(self.b_only.name, ledger) for ledger in self.b_only.ledgers),
        ]


def _data(topic: str, ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


@pytest.fixture
def clusters(
    zk: KazooClient, stack: StackEndpoints, make_cluster: Callable[..., SimulatedCluster]
) -> Iterator[TwoClusters]:
    uid = uuid.uuid4().hex[:8]
    chroot = f"/shbk-b-{uid}"
    zk.ensure_path("/schemas")  # A's store has stored a schema before (B's gets one below)
    a = make_cluster()
    b = make_cluster(metadata_root=chroot)  # a second Pulsar cluster's store, on the same BookKeeper
    tenant = f"shbk{uid}"
    geo = f"{tenant}/geo/orders"
    # B's ledgers first: its ids are all below A's, as for a geo-replicated topic B created earlier.
    geo_b = b.create_topic(geo, b.new_ledger_ids(3))
    [b_cursor_ledger, b_schema_ledger] = b.new_ledger_ids(2)
    b.add_cursor(geo, "sub-b", b_cursor_ledger)
    b.add_schema(geo, [b_schema_ledger])
    b_only = b.create_topic(f"{tenant}/only-b/events", b.new_ledger_ids(2))
    geo_a = a.create_topic(geo, a.new_ledger_ids(3))
    a_only = a.create_topic(f"{tenant}/geo/a-only", a.new_ledger_ids(3))
    yield TwoClusters(
        a,
        b,
        f"{stack.zookeeper}{chroot}",
        tenant,
        geo_a,
        geo_b,
        b_cursor_ledger,
        b_schema_ledger,
        b_only,
        a_only,
    )
    zk.delete(chroot, recursive=True)  # make_cluster removes the rest of what a and b wrote


def test_a_namespace_is_known_by_its_managed_ledgers_in_the_clusters_own_store(
    clusters: TwoClusters, stack: StackEndpoints, zk: KazooClient
) -> None:
    ours, theirs = PulsarMetadataStore(stack.zookeeper), PulsarMetadataStore(clusters.b_store)
    try:
        tenant = clusters.tenant
        assert ours.knows_namespace(f"{tenant}/geo") and theirs.knows_namespace(f"{tenant}/geo")
        assert theirs.knows_namespace(f"{tenant}/only-b") and not ours.knows_namespace(f"{tenant}/only-b")
        # The configuration store's policies are shared by geo-replicated clusters: not ours for that.
        zk.ensure_path(f"/admin/policies/{tenant}/policies-only")
        assert not ours.knows_namespace(f"{tenant}/policies-only")
    finally:
        ours.close()
        theirs.close()
        zk.delete(f"/admin/policies/{tenant}", recursive=True)


def test_every_store_is_read_and_a_listing_in_any_keeps_the_ledger(
    clusters: TwoClusters, stack: StackEndpoints
) -> None:
    ledgers, ours, theirs = (
        LedgerReader(stack.zookeeper),
        PulsarMetadataStore(stack.zookeeper),
        PulsarMetadataStore(clusters.b_store),
    )
    try:
        alone = BookKeeperReadActivities(ledgers, ours)
        shared = BookKeeperReadActivities(ledgers, ours, [theirs])
        env = ActivityEnvironment()
        for request in clusters.b_requests():
            kept = env.run(shared.verify_bk_metadata, VerifyBkMetadataInput(request))
            assert kept.verdict is Verdict.MATCH, (request, kept)
            assert kept.metadata_store_listing or kept.schema_referenced, (request, kept)
            assert "another Pulsar cluster" in (kept.metadata_store_listing or kept.reason)
        # What A alone made of B's geo-replicated data ledger: listed nowhere, below A's newest, so settled
        # and deletable (the data loss of issue 39).
        blind = env.run(alone.verify_bk_metadata, VerifyBkMetadataInput(clusters.b_requests()[0]))
        assert blind.verdict is Verdict.MATCH and not blind.metadata_store_listing
        assert blind.newest_listed > clusters.b_requests()[0].ledger_id
    finally:
        ledgers.close()
        ours.close()
        theirs.close()


def test_with_a_list_a_namespace_no_store_knows_is_never_deleted(
    clusters: TwoClusters, stack: StackEndpoints, zk: KazooClient, new_ledger_id: Any
) -> None:
    ghost = f"{clusters.tenant}/ghost/persistent/t"  # a third cluster nobody declared
    ledger_id = new_ledger_id()
    zk.create(
        ledger_path(ledger_id),
        build_pulsar_ledger_metadata(
            managed_ledger_custom_metadata(ghost), ctime=int(time.time() * 1000) - 48 * HOUR_MS
        ),
        makepath=True,
    )
    ledgers, ours, theirs = (
        LedgerReader(stack.zookeeper),
        PulsarMetadataStore(stack.zookeeper),
        PulsarMetadataStore(clusters.b_store),
    )
    try:
        shared = BookKeeperReadActivities(ledgers, ours, [theirs])
        result = ActivityEnvironment().run(
            shared.verify_bk_metadata, VerifyBkMetadataInput(_data(f"{clusters.tenant}/ghost/t", ledger_id))
        )
        assert result.verdict is Verdict.UNKNOWN_NAMESPACE, result
        assert f"namespace {clusters.tenant}/ghost is known to none of the 2" in result.reason
    finally:
        ledgers.close()
        ours.close()
        theirs.close()
        zk.delete(ledger_path(ledger_id))


async def test_the_bookkeeper_pool_refuses_an_unknown_namespace_once_tripped(
    stack: StackEndpoints, temporal_client: Client, zk: KazooClient, new_ledger_id: Any
) -> None:
    """Verified while untripped, deleted only if still untripped when the delete runs (a grace or a pause may
    lie between): the bookkeeper pool asks the tripwire again."""
    wire = tripwire.tripwire_id(f"ld-shbk-{uuid.uuid4().hex[:8]}")
    view = tripwire.View(temporal_client, wire, "the test", 1.0, 10.0)
    ledgers = [new_ledger_id(), new_ledger_id()]
    for ledger_id in ledgers:
        zk.create(
            ledger_path(ledger_id),
            build_pulsar_ledger_metadata(managed_ledger_custom_metadata("gone/ns/persistent/t")),
            makepath=True,
        )
    store = LedgerStore(stack.zookeeper)
    deletes = BookKeeperDeleteActivities(store, tripwire=view)
    env = ActivityEnvironment()
    try:
        await view.refresh()
        first = env.run(deletes.delete_bk_ledger, DeleteBkLedgerInput(ledgers[0], 0, "gone/ns"))
        assert first.status is DeleteBkLedgerStatus.DELETED
        evidence = tripwire.Evidence("other/ns", 1, int(time.time() * 1000), "the test")
        await tripwire.trip(temporal_client, wire, evidence, "the test")
        await view.refresh()
        second = env.run(deletes.delete_bk_ledger, DeleteBkLedgerInput(ledgers[1], 0, "gone/ns"))
        assert second.status is DeleteBkLedgerStatus.TRIPPED and zk.exists(ledger_path(ledgers[1]))
    finally:
        store.close()
        for ledger_id in ledgers:
            if zk.exists(ledger_path(ledger_id)):
                zk.delete(ledger_path(ledger_id))
        await _delete_schedule(temporal_client, wire)


async def test_with_none_offloaded_objects_of_an_unknown_namespace_wait_for_the_tripwire(
    stack: StackEndpoints, temporal_client: Client, cluster: SimulatedCluster
) -> None:
    """``none``: an offload is never evidence (nothing dates it), but once the tripwire is tripped the objects
    of a namespace this cluster does not have are kept, as its BookKeeper ledgers are: by the check, and by
    the offload pool, which asks again before it deletes (a grace or a pause may lie between). Unread, they
    wait."""
    wire = tripwire.tripwire_id(f"ld-shbk-{uuid.uuid4().hex[:8]}")
    view = tripwire.View(temporal_client, wire, "the test", 1.0, 10.0)
    namespace = f"gone-{uuid.uuid4().hex[:8]}/ns"
    topic = f"{namespace}/t"
    first, second = cluster.new_ledger_ids(2)
    cluster.create_topic(
        topic, [first, second], offloaded=[first, second], bookkeeper_deleted=[first, second]
    )
    requests = {r.ledger_id: r for r in cluster.requests_for_trim(topic, [first, second])}
    keys = {ledger: cluster.offload_keys(topic, ledger) for ledger in (first, second)}
    cluster.zk.delete(f"/managed-ledgers/{namespace}", recursive=True)  # the namespace deleted half-way
    ledgers, ours = LedgerReader(stack.zookeeper), PulsarMetadataStore(stack.zookeeper)
    reads = BookKeeperReadActivities(ledgers, ours, tripwire=view)
    deletes = OffloadActivities(ObjectStore(stack.s3_endpoint), cluster.bucket, tripwire=view)
    blind = OffloadActivities(ObjectStore(stack.s3_endpoint), cluster.bucket)  # reads no tripwire

    def delete(activities: OffloadActivities, ledger: int) -> DeleteOffloadResult:
        request = requests[ledger]
        assert request.context is not None
        objects = DeleteOffloadInput(ledger, request.managed_ledger_name, request.context, namespace)
        result: DeleteOffloadResult = env.run(activities.delete_offload_segment, objects)
        return result

    env = ActivityEnvironment()
    try:
        with pytest.raises(ApplicationError, match="TripwireStateUnknown"):  # retried by Temporal
            env.run(reads.check_offload_listed, OffloadListedInput(requests[first]))
        await view.refresh()
        # Untripped: an old orphan of a namespace deleted half-way; the delete asks again, and it may go.
        listed = env.run(reads.check_offload_listed, OffloadListedInput(requests[first]))
        assert listed == OffloadListedResult(unknown_namespace=namespace)
        with pytest.raises(ApplicationError, match="TripwireStateUnknown"):
            delete(blind, first)
        assert delete(deletes, first).outcome is Outcome.DELETED
        evidence = tripwire.Evidence("other/ns", 1, int(time.time() * 1000), "the test")
        await tripwire.trip(temporal_client, wire, evidence, "the test")
        await view.refresh()
        kept = env.run(reads.check_offload_listed, OffloadListedInput(requests[second]))
        assert "is not this cluster's and the shared-BookKeeper tripwire is TRIPPED" in kept.namespace_refusal
        # Checked before the trip, deleted after it: the offload pool refuses.
        refused = delete(deletes, second)
        assert refused.outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, refused
        assert "tripwire tripped before the delete" in refused.reason
        assert [cluster.object_exists(k, b) for b, k in keys[first] + keys[second]] == [False] * 2 + [
            True
        ] * 2
    finally:
        ledgers.close()
        ours.close()
        await _delete_schedule(temporal_client, wire)


def _service_settings(settings: Settings, shared_with: str) -> Settings:
    uid = uuid.uuid4().hex[:8]
    return settings.with_overrides(
        topic=f"persistent://pulsar/system/__ld_shbk_{uid}",
        task_queue_prefix=f"ld-shbk-{uid}",
        bookkeeper_shared_with=shared_with,
    )


async def _decide(
    settings: Settings, client: Client, requests: list[PendingDeleteLedgerInfo]
) -> dict[int, Any]:
    with RequestPublisher(settings) as publisher:
        for request in requests:
            publisher.publish(request)
    return {r.ledger_id: await wait_for_result(client, r.workflow_id) for r in requests}


async def test_configured_with_the_other_store_the_service_deletes_none_of_its_ledgers(
    clusters: TwoClusters, settings: Settings, temporal_client: Client, zk: KazooClient, new_ledger_id: Any
) -> None:
    service = _service_settings(settings, clusters.b_store)
    ghost_id = new_ledger_id()
    zk.create(
        ledger_path(ghost_id),
        build_pulsar_ledger_metadata(managed_ledger_custom_metadata(f"{clusters.tenant}/ghost/persistent/t")),
        makepath=True,
    )
    # One orphan of A's own, so that the run shows the service deleting what it should.
    [ours] = sorted(clusters.a_only.ledgers)[:1]
    clusters.a.remove_ledgers_from_metadata(clusters.a_only.name, [ours])
    requests = [
        *clusters.b_requests(),
        _data(f"{clusters.tenant}/ghost/t", ghost_id),
        _data(clusters.a_only.name, ours),
    ]
    try:
        async with running_pools(service, temporal_client):
            results = await _decide(service, temporal_client, requests)
        for request in clusters.b_requests():
            assert results[request.ledger_id].outcome is not Outcome.DELETED, results[request.ledger_id]
            assert clusters.b.ledger_exists(request.ledger_id), request
        assert results[ghost_id].outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, results[ghost_id]
        assert zk.exists(ledger_path(ghost_id))
        assert results[ours].outcome is Outcome.DELETED, results[ours]
    finally:
        if zk.exists(ledger_path(ghost_id)):
            zk.delete(ledger_path(ghost_id))


async def test_offloaded_objects_follow_the_same_rule_whether_or_not_the_topic_is_ours(
    clusters: TwoClusters,
    settings: Settings,
    temporal_client: Client,
    zk: KazooClient,
    make_cluster: Callable[..., SimulatedCluster],
) -> None:
    """The two clusters offload to one bucket, and the service is told to delete offloaded objects of topics
    it does not have: B's, which B's store still lists, and a third cluster's nobody declared. Neither goes;
    A's own offloaded orphan of a deleted topic still does.

    Before, the workflow read the stores only while the topic existed here: B's listed objects were deleted
    (DELETED), the namespace went unchecked."""
    tenant = clusters.tenant
    b_topic = f"{tenant}/only-b/offloaded"  # B's, listed in B's store only
    [b_ledger] = clusters.b.new_ledger_ids(1)
    clusters.b.create_topic(b_topic, [b_ledger], offloaded=[b_ledger], bookkeeper_deleted=[b_ledger])
    ghost_root = f"/shbk-ghost-{uuid.uuid4().hex[:8]}"
    ghost = make_cluster(metadata_root=ghost_root)  # a third cluster nobody declared, on the same bucket
    ghost_topic = f"{tenant}/ghost-offload/t"
    [ghost_ledger] = ghost.new_ledger_ids(1)
    ghost.create_topic(
        ghost_topic, [ghost_ledger], offloaded=[ghost_ledger], bookkeeper_deleted=[ghost_ledger]
    )
    a_topic = f"{tenant}/geo/offloaded-then-deleted"  # A's own, in a namespace A has
    [a_ledger] = clusters.a.new_ledger_ids(1)
    clusters.a.create_topic(a_topic, [a_ledger], offloaded=[a_ledger], bookkeeper_deleted=[a_ledger])
    [b_request] = clusters.b.requests_for_trim(b_topic, [b_ledger])
    [ghost_request] = ghost.requests_for_trim(ghost_topic, [ghost_ledger])
    [a_request] = clusters.a.requests_for_trim(a_topic, [a_ledger])
    assert {r.ledger_type for r in (b_request, ghost_request, a_request)} == {LedgerType.OFFLOAD_LEDGER}
    keys = {
        b_ledger: clusters.b.offload_keys(b_topic, b_ledger),
        ghost_ledger: ghost.offload_keys(ghost_topic, ghost_ledger),
        a_ledger: clusters.a.offload_keys(a_topic, a_ledger),
    }
    ghost.delete_topic(ghost_topic)
    zk.delete(ghost_root, recursive=True)  # its store is nowhere this service can read
    clusters.a.delete_topic(a_topic)
    service = _service_settings(settings, clusters.b_store)
    async with running_pools(service, temporal_client):
        results = await _decide(service, temporal_client, [b_request, ghost_request, a_request])
    # B's store lists the objects: kept through the grace, then dead-lettered for replay, as a ledger B
    # lists is.
    assert results[b_ledger].outcome is Outcome.DEAD_LETTERED, results[b_ledger]
    assert "pulsar-b" in results[b_ledger].reason or "another Pulsar cluster" in results[b_ledger].reason
    assert results[ghost_ledger].outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, results[ghost_ledger]
    assert f"namespace {tenant}/ghost-offload is known to none" in results[ghost_ledger].reason
    assert results[a_ledger].outcome is Outcome.DELETED, results[a_ledger]
    for ledger, kept in ((b_ledger, True), (ghost_ledger, True), (a_ledger, False)):
        assert [clusters.a.object_exists(key, bucket) for bucket, key in keys[ledger]] == [kept] * 2, ledger


async def test_configured_none_the_tripwire_stops_unknown_namespace_deletes(
    clusters: TwoClusters,
    settings: Settings,
    temporal_client: Client,
    zk: KazooClient,
    new_ledger_id: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = InMemoryMetricReader()
    monkeypatch.setattr(metrics, "_current", metrics.Metrics(MeterProvider(metric_readers=[reader])))
    service = _service_settings(settings, "none")
    wire = tripwire.tripwire_id(service.task_queue_prefix)
    old = int(time.time() * 1000) - tripwire.WINDOW.total_seconds() * 1000 - HOUR_MS
    gone = [new_ledger_id(), new_ledger_id()]  # a namespace A deleted half-way: old orphans
    for ledger_id in gone:
        zk.create(
            ledger_path(ledger_id),
            build_pulsar_ledger_metadata(
                managed_ledger_custom_metadata(f"{clusters.tenant}/gone/persistent/t"), ctime=int(old)
            ),
            makepath=True,
        )
    b_only = sorted(clusters.b_only.ledgers)
    try:
        async with running_pools(service, temporal_client):
            # Nothing tripped: an old ledger of a namespace A no longer has is an orphan, deleted.
            before = await _decide(service, temporal_client, [_data(f"{clusters.tenant}/gone/t", gone[0])])
            assert before[gone[0]].outcome is Outcome.DELETED, before
            # B's recent ledgers prove another writer: kept, and the tripwire trips.
            evidence = await _decide(service, temporal_client, [_data(clusters.b_only.name, b_only[0])])
            assert evidence[b_only[0]].outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, evidence
            assert clusters.b.ledger_exists(b_only[0])
            state = await tripwire.read(temporal_client, wire)
            assert state.tripped and state.namespaces == (f"{clusters.tenant}/only-b",), state
            # Tripped: no ledger of an unknown namespace is deleted, old or new; a known one still is.
            [ours] = sorted(clusters.a_only.ledgers)[:1]
            clusters.a.remove_ledgers_from_metadata(clusters.a_only.name, [ours])
            after = await _decide(
                service,
                temporal_client,
                [
                    _data(f"{clusters.tenant}/gone/t", gone[1]),
                    _data(clusters.b_only.name, b_only[1]),
                    _data(clusters.a_only.name, ours),
                ],
            )
            assert after[gone[1]].outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, after
            assert after[b_only[1]].outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, after
            assert zk.exists(ledger_path(gone[1])) and clusters.b.ledger_exists(b_only[1])
            assert after[ours].outcome is Outcome.DELETED, after
            points = _points(reader)
            assert points["ledger_deletion_shared_bookkeeper_tripped"] == {f"{clusters.tenant}/only-b": 1}
            assert points["ledger_deletion_shared_bookkeeper_evidence"] == {f"{clusters.tenant}/only-b": 2}
        cleared = await tripwire.clear(temporal_client, wire, "the test")
        assert not cleared.tripped
    finally:
        for ledger_id in gone:
            if zk.exists(ledger_path(ledger_id)):
                zk.delete(ledger_path(ledger_id))
        await _delete_schedule(temporal_client, wire)


def _points(reader: InMemoryMetricReader) -> dict[str, dict[str, float]]:
    data = reader.get_metrics_data()
    found: dict[str, dict[str, float]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is not None and point.attributes and "namespace" in point.attributes:
                        found.setdefault(metric.name, {})[str(point.attributes["namespace"])] = value
    return found


async def _delete_schedule(client: Client, schedule_id: str) -> None:
    with contextlib.suppress(Exception):  # never created
        await client.get_schedule_handle(schedule_id).delete()
