"""The watcher when another Pulsar cluster shares this BookKeeper (issue 39, section 1).

Cluster A is the test's corner (a ZooKeeper chroot with the BookKeeper ``/ledgers`` both clusters write to);
cluster B keeps its metadata store in a chroot of its own on the same ZooKeeper. B has a geo-replicated
topic of the same managed-ledger name as one of A's, with lower ledger ids, and a namespace only it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.client import Client

from devstack.stack import StackEndpoints
from ledger_deletion import tripwire
from ledger_deletion.adapters.zookeeper import kazoo_client
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import managed_ledger_name, serialize_managed_ledger_info
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.observability import metrics
from tests.integration.watch_support import DELAY, Corner, TopicReader, corner, until, watching

pytestmark = pytest.mark.stack

SLACK = 12.0
GEO = "public/default/geo"  # a geo-replicated topic: both clusters have it
B_ONLY = "other-tenant/b-only/events"  # a namespace only B has


@contextlib.contextmanager
def cluster_b(stack: StackEndpoints, c: Corner) -> Iterator[tuple[str, KazooClient]]:
    """B's metadata store: a chroot of its own next to A's, with Pulsar's roots."""
    store = f"{stack.zookeeper}{c.chroot}-b"
    root = kazoo_client(stack.zookeeper, 10.0)
    root.start(timeout=10)
    for path in ("managed-ledgers", "schemas"):
        root.ensure_path(f"{c.chroot}-b/{path}")
    zk = kazoo_client(store, 10.0)
    zk.start(timeout=10)
    try:
        yield store, zk
    finally:
        zk.stop()
        zk.close()
        with contextlib.suppress(Exception):
            root.delete(f"{c.chroot}-b", recursive=True)
        root.stop()
        root.close()


def b_topic(c: Corner, b_zk: KazooClient, topic: str, ids: list[int]) -> None:
    """B's topic: its ledgers in the shared BookKeeper (tagged as Pulsar tags them, no cluster named) and
    listed in B's store only."""
    name = managed_ledger_name(topic)
    for ledger_id in ids:
        c.zk.create(
            ledger_path(ledger_id, c.cluster.ledgers_root),
            build_pulsar_ledger_metadata(
                managed_ledger_custom_metadata(name),
                length=64,
                last_entry_id=0,
                ctime=int(time.time() * 1000),
            ),
            makepath=True,
        )
    info = ml_pb.ManagedLedgerInfo()
    for ledger_id in ids:
        info.ledgerInfo.add(ledgerId=ledger_id)
    b_zk.create(f"/managed-ledgers/{name}", serialize_managed_ledger_info(info), makepath=True)


async def test_the_watcher_requests_none_of_another_clusters_ledgers(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    """Configured with B's store: B's geo-replicated topic's ledgers (below A's newest, unlisted by A) and
    its own namespace's are not requested; A's orphan is. (Before, every one of B's was.)"""
    with corner(stack, s3, new_ledger_id) as c, cluster_b(stack, c) as (b_store, b_zk):
        # B's geo ledgers around A's: one below A's newest, one above (a geo topic's ledger below the lowest
        # newest of the stores listing it is settled; above it, it may be either's rollover under way).
        b_geo = [new_ledger_id()]
        a_geo = c.broker.create_topic(GEO, 3)
        b_geo.append(new_ledger_id())
        b_only = [new_ledger_id(), new_ledger_id()]
        c.broker.trim(GEO, [a_geo[0]], bk_delete_fails=[a_geo[0]])
        b_topic(c, b_zk, GEO, b_geo)
        b_topic(c, b_zk, B_ONLY, b_only)
        settings = c.settings.with_overrides(bookkeeper_shared_with=b_store)
        reader = TopicReader(settings)
        async with watching(settings, temporal_client) as watcher:
            await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
            await asyncio.to_thread(reader.drain, DELAY + SLACK)
        reader.close()
        assert reader.keys() == [("LEDGER", a_geo[0])], watcher.stats


async def test_with_none_a_recent_ledger_of_an_unknown_namespace_trips_the_tripwire(
    stack: StackEndpoints,
    s3: Any,
    temporal_client: Client,
    new_ledger_id: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Configured ``none`` while B writes to the BookKeeper: B's namespace is unknown to A and its ledgers
    are recent, so the resync trips the tripwire and requests none of them. (Before, it requested them.)"""
    reader_metrics = InMemoryMetricReader()
    monkeypatch.setattr(metrics, "_current", metrics.Metrics(MeterProvider(metric_readers=[reader_metrics])))
    with corner(stack, s3, new_ledger_id) as c, cluster_b(stack, c) as (_, b_zk):
        b_only = [new_ledger_id(), new_ledger_id()]
        a_ids = c.broker.create_topic("public/default/a", 2)
        b_topic(c, b_zk, B_ONLY, b_only)
        settings = c.settings.with_overrides(bookkeeper_shared_with="none")
        reader = TopicReader(settings)
        async with watching(settings, temporal_client) as watcher:
            await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
            await asyncio.to_thread(reader.drain, DELAY + SLACK)
        reader.close()
        assert reader.keys() == [], watcher.stats
        assert watcher.stats.unknown_namespace == len(b_only)
        state = await tripwire.read(temporal_client, tripwire.tripwire_id(settings.task_queue_prefix))
        assert state.tripped and state.namespaces == ("other-tenant/b-only",), state
        assert all(c.cluster.ledger_exists(i) for i in [*a_ids, *b_only])
        data = reader_metrics.get_metrics_data()
        assert data is not None
        counted = {
            (metric.name, str((point.attributes or {}).get("namespace"))): getattr(point, "value", None)
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
        }
        assert counted[("ledger_deletion_watch_unknown_namespace", "other-tenant/b-only")] == len(b_only)
        assert counted[("ledger_deletion_shared_bookkeeper_evidence", "other-tenant/b-only")] >= 1
