"""Two Pulsar clusters on one BookKeeper (apache/pulsar#5985): reconcile reads every declared metadata store.

Cluster A (ours) and cluster B each keep their metadata in a ZooKeeper chroot of their own on the embedded
stack's ZooKeeper; their ledgers share one ledgers root there, as they share BookKeeper. B has a
geo-replicated topic of the same managed-ledger name as A's (its ids below A's newest: one id generator) and
a namespace only it has. The tags a broker writes name no cluster (``LedgerMetadataUtils``), so only B's
store can say which ledgers are B's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from temporalio.service import RPCError

from ledger_deletion.errors import PulsarMetadataNotFound
from ledger_deletion.formats.bk_metadata import (
    build_pulsar_ledger_metadata,
    cursor_custom_metadata,
    managed_ledger_custom_metadata,
    schema_custom_metadata,
)
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    SchemaLocator,
    serialize_managed_cursor_info,
    serialize_managed_ledger_info,
    serialize_schema_locator,
)
from ledger_deletion.settings import Settings
from ledger_deletion.temporal_client import connect_temporal
from ledger_deletion.tripwire import TripState
from ledger_deletion.tripwire import read as read_tripwire
from reconcile.cli import SEEN_BY, TemporalTripwire
from reconcile.extract import NAMESPACES, REFERENCES, ExtractConfig
from reconcile.job import FINDINGS_PARQUET, SUMMARY_JSON, JobConfig, run

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

GEO_ML = "public/geo/persistent/orders"  # replicated: the same managed-ledger name in A and in B
GEO_SCHEMA = "public/geo/orders"
B_ONLY_ML = "bravo/private/persistent/audit"  # a namespace only B has
GHOST_ML = "ghost/gone/persistent/t"  # a namespace no declared store has
A_ML = "public/geo/persistent/local"  # a topic of A's alone
SHARED = "namespace-unknown-bookkeeper-shared"


@dataclass(frozen=True)
class Clusters:
    ledgers_root: str  # BookKeeper's, on the real root: both clusters write their ledgers there
    store_a: str  # connect strings with chroot
    store_b: str
    a_data: int
    a_orphan: int
    b_ledgers: tuple[int, ...]  # everything B's store references
    ghost: int  # an old ledger of a namespace no store knows


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts)
    client.start()
    return client


def _ledger(zk: KazooClient, root: str, ledger_id: int, custom: dict[str, str]) -> None:
    data = build_pulsar_ledger_metadata(custom, length=100, last_entry_id=9)
    zk.create(ledger_path(ledger_id, root), data, makepath=True)


def _topic(hosts: str, ml_name: str, ledgers: Sequence[int], cursor: int | None = None) -> None:
    """A managed ledger's record listing ``ledgers`` and, with ``cursor``, a cursor stored in that ledger."""
    info = ManagedLedgerInfo()
    for ledger_id in ledgers:
        info.ledgerInfo.add(ledgerId=ledger_id, entries=10, size=100, timestamp=1)
    client = _client(hosts)
    try:
        client.create(f"/managed-ledgers/{ml_name}", serialize_managed_ledger_info(info), makepath=True)
        if cursor is not None:
            ci = ManagedCursorInfo(cursorsLedgerId=cursor, markDeleteLedgerId=ledgers[-1])
            client.create(f"/managed-ledgers/{ml_name}/sub", serialize_managed_cursor_info(ci))
    finally:
        client.stop()
        client.close()


def _schema(hosts: str, schema_id: str, ledger_id: int) -> None:
    locator = SchemaLocator()
    entry = locator.index.add(version=0, hash=b"\x01" * 8)
    entry.position.ledgerId = ledger_id
    entry.position.entryId = 0
    locator.info.CopyFrom(locator.index[-1])
    client = _client(hosts)
    try:
        client.create(f"/schemas/{schema_id}", serialize_schema_locator(locator), makepath=True)
    finally:
        client.stop()
        client.close()


@pytest.fixture
def tops(zk: Any) -> Iterator[Callable[[str], str]]:
    """Maker of unique top-level znodes on the stack's ZooKeeper, all removed after the test."""
    made: list[str] = []

    def make(kind: str) -> str:
        top = f"/{kind}-{uuid.uuid4().hex[:10]}"
        zk.ensure_path(top)
        made.append(top)
        return top

    yield make
    for top in made:
        zk.delete(top, recursive=True)


@pytest.fixture
def clusters(stack: Any, zk: Any, tops: Callable[[str], str], new_ledger_id: Callable[[], int]) -> Clusters:
    """B's ledgers first (lower ids), then A's, all Pulsar-tagged and old enough, in one ledgers root."""
    root = tops("shared-bk") + "/ledgers"
    store_a, store_b = stack.zookeeper + tops("pulsar-a"), stack.zookeeper + tops("pulsar-b")
    b_geo, b_cursor, b_schema, b_private = (new_ledger_id() for _ in range(4))
    ghost = new_ledger_id()
    a_orphan, a_data, a_local = new_ledger_id(), new_ledger_id(), new_ledger_id()
    _ledger(zk, root, b_geo, managed_ledger_custom_metadata(GEO_ML))
    _ledger(zk, root, b_cursor, cursor_custom_metadata(GEO_ML, "sub"))
    _ledger(zk, root, b_schema, schema_custom_metadata(GEO_SCHEMA))
    _ledger(zk, root, b_private, managed_ledger_custom_metadata(B_ONLY_ML))
    _ledger(zk, root, ghost, managed_ledger_custom_metadata(GHOST_ML))
    _ledger(zk, root, a_data, managed_ledger_custom_metadata(GEO_ML))
    _ledger(zk, root, a_local, managed_ledger_custom_metadata(A_ML))
    # A's orphan: trimmed from its topic's list, older than the ledger it lists now, its delete failed.
    _ledger(zk, root, a_orphan, managed_ledger_custom_metadata(A_ML))
    _topic(store_b, GEO_ML, [b_geo], cursor=b_cursor)
    _schema(store_b, GEO_SCHEMA, b_schema)
    _topic(store_b, B_ONLY_ML, [b_private])
    _topic(store_a, GEO_ML, [a_data])
    _topic(store_a, A_ML, [a_local])
    return Clusters(root, store_a, store_b, a_data, a_orphan, (b_geo, b_cursor, b_schema, b_private), ghost)


@pytest.fixture
def tripwire(settings: Settings) -> Iterator[TemporalTripwire]:
    """The service's shared-BookKeeper tripwire (a Temporal Schedule) of a deployment of this test's own."""
    wire = TemporalTripwire(settings.model_copy(update={"task_queue_prefix": f"rc-{uuid.uuid4().hex[:8]}"}))
    yield wire

    async def remove() -> None:
        client = await connect_temporal(settings)
        with contextlib.suppress(RPCError):  # never created: nothing tripped it
            await client.get_schedule_handle(wire.id).delete()

    asyncio.run(remove())


def _trip_state(settings: Settings, wire: TemporalTripwire) -> TripState:
    async def read() -> TripState:
        return await read_tripwire(await connect_temporal(settings), wire.id)

    return asyncio.run(read())


def _findings(spark: Any, out: Path) -> dict[int, tuple[str, str | None]]:
    rows = spark.read.parquet(str(out / FINDINGS_PARQUET)).collect()
    return {r["ledger_id"]: (r["status"], r["reason"]) for r in rows}


@pytest.mark.spark
def test_declared_store_keeps_the_other_clusters_ledgers(
    stack: Any, spark: Any, s3: Any, clusters: Clusters, tmp_path: Path
) -> None:
    """Configured with B's store: none of B's ledgers is submitted (the geo-replicated topic's included, whose
    ids A's store does not list), the ghost namespace's old ledger is report-only with its reason, and A's
    own orphan is the one request. Without B's store declared, B's four ledgers would be candidates."""
    extract = ExtractConfig(
        zookeeper=stack.zookeeper,
        ledgers_root=clusters.ledgers_root,
        pulsar_metadata_zookeeper=clusters.store_a,
        other_pulsar_metadata_stores=(clusters.store_b,),
        workers=1,
    )
    config = JobConfig(
        extract=extract,
        out=tmp_path,
        now_ms=int(time.time() * 1000) + 1000,
        min_age_seconds=0,
        master="local[2]",
        bookkeeper_alone=False,
    )

    result = run(config, spark=spark, s3_client=s3)

    assert {r.ledger_id for r in result.requests} == {clusters.a_orphan}
    findings = _findings(spark, tmp_path)
    assert not set(clusters.b_ledgers) & set(findings)  # B's store references them: no findings at all
    assert findings[clusters.ghost] == ("report-only", "namespace-unknown")
    summary = json.loads((tmp_path / SUMMARY_JSON).read_text())
    assert summary["report_only"]["namespace-unknown"]["count"] == 1
    assert "none of the Pulsar metadata stores" in summary["report_only"]["namespace-unknown"]["why"]
    assert summary["shared_bookkeeper"]["other_stores"] == [clusters.store_b]
    references = spark.read.parquet(result.extract.path(REFERENCES)).collect()
    by_store = {(r["ledger_id"], r["store"]) for r in references}
    assert (clusters.b_ledgers[0], clusters.store_b) in by_store
    assert (clusters.a_data, clusters.store_a) in by_store
    namespaces = spark.read.parquet(result.extract.path(NAMESPACES)).collect()
    known = {(r["store"], r["namespace"]) for r in namespaces}
    assert {(clusters.store_b, "bravo/private"), (clusters.store_a, "public/geo")} <= known
    assert (clusters.store_a, "bravo/private") not in known


@pytest.mark.spark
def test_none_with_a_recent_unknown_namespace_ledger_trips_and_submits_none_of_them(
    stack: Any,
    spark: Any,
    s3: Any,
    zk: Any,
    settings: Settings,
    clusters: Clusters,
    tripwire: TemporalTripwire,
    new_ledger_id: Callable[[], int],
    tmp_path: Path,
) -> None:
    """Configured ``none`` (B undeclared): B writes a new ledger in its private namespace. That recent ledger
    of a namespace A does not know is evidence: the run reports it, trips the tripwire before publishing,
    and submits no ledger of an unknown namespace (B's older private one, the ghost's). B's geo-replicated
    ledgers, in a namespace A knows, cannot be told apart here: that is what declaring B's store is for."""
    window_seconds = 3.0
    time.sleep(window_seconds + 1)  # the fixture's ledgers are now older than the window
    recent = new_ledger_id()
    _ledger(zk, clusters.ledgers_root, recent, managed_ledger_custom_metadata(B_ONLY_ML))
    extract = ExtractConfig(
        zookeeper=stack.zookeeper,
        ledgers_root=clusters.ledgers_root,
        pulsar_metadata_zookeeper=clusters.store_a,
        workers=1,
    )
    config = JobConfig(
        extract=extract,
        out=tmp_path,
        now_ms=int(time.time() * 1000) + 500,
        min_age_seconds=0,
        master="local[2]",
        bookkeeper_alone=True,
        tripwire_window_seconds=window_seconds,
    )
    published: list[Any] = []

    def publish(requests: Sequence[Any]) -> int:
        published.extend(requests)
        return len(requests)

    result = run(config, spark=spark, s3_client=s3, publish=publish, tripwire=tripwire)

    submitted = {r.ledger_id for r in published}
    private = clusters.b_ledgers[3]
    assert not submitted & {recent, private, clusters.ghost}
    assert clusters.a_orphan in submitted
    findings = _findings(spark, tmp_path)
    assert findings[private] == findings[clusters.ghost] == findings[recent] == ("report-only", SHARED)
    assert result.tripped
    [evidence] = result.shared_bookkeeper_evidence
    assert evidence["namespace"] == "bravo/private"
    assert (evidence["ledgers"], evidence["newest_ledger_id"]) == (1, recent)
    state = _trip_state(settings, tripwire)
    assert state.tripped and state.namespaces == ("bravo/private",)
    assert f"ledger {recent} " in state.note and SEEN_BY in state.note
    summary = json.loads((tmp_path / SUMMARY_JSON).read_text())
    assert summary["shared_bookkeeper"]["evidence"][0]["namespace"] == "bravo/private"
    assert summary["report_only"][SHARED]["count"] == 3


@pytest.mark.spark
def test_none_while_tripped_submits_no_unknown_namespace_ledger(
    stack: Any, spark: Any, s3: Any, clusters: Clusters, tripwire: TemporalTripwire, tmp_path: Path
) -> None:
    """``none``, no recent ledger of an unknown namespace in this run, but the tripwire was tripped before
    (by the watcher, the workflow pool, an earlier run) and not cleared: the unknown namespaces' old
    ledgers are not submitted either, and nothing trips again. Not submitting, the tripwire is not read:
    the old ledgers are candidates, as a namespace deleted half-way leaves them."""
    extract = ExtractConfig(
        zookeeper=stack.zookeeper,
        ledgers_root=clusters.ledgers_root,
        pulsar_metadata_zookeeper=clusters.store_a,
        workers=1,
    )
    config = JobConfig(
        extract=extract,
        out=tmp_path,
        now_ms=int(time.time() * 1000) + 1000,
        min_age_seconds=0,
        master="local[2]",
        bookkeeper_alone=True,
        tripwire_window_seconds=0.5,  # the fixture's ledgers are older than that: no evidence
    )
    # An earlier run (or the watcher, the workflow pool) tripped it, and nobody cleared it.
    tripwire.trip([{"namespace": "bravo/private", "newest_ledger_id": 1, "newest_created_ms": 0}])
    published: list[Any] = []

    def publish(requests: Sequence[Any]) -> int:
        published.extend(requests)
        return len(requests)

    result = run(config, spark=spark, s3_client=s3, publish=publish, tripwire=tripwire)

    unknown = {clusters.b_ledgers[3], clusters.ghost}
    submitted = {r.ledger_id for r in published}
    assert not submitted & unknown and clusters.a_orphan in submitted
    assert result.shared_bookkeeper_evidence == [] and not result.tripped
    findings = _findings(spark, tmp_path)
    assert {findings[i] for i in unknown} == {("report-only", SHARED)}

    dry = run(replace(config, out=tmp_path / "dry"), spark=spark, s3_client=s3, tripwire=tripwire)

    assert unknown <= {r.ledger_id for r in dry.requests}


def test_a_declared_store_without_managed_ledgers_root_refuses(
    stack: Any, clusters: Clusters, tops: Callable[[str], str], tmp_path: Path
) -> None:
    """A declared store with no /managed-ledgers (a wrong chroot: PulsarClusterMetadataSetup creates it before
    any broker runs) would leave that cluster's ledgers unprotected: the job refuses, naming it."""
    wrong = stack.zookeeper + tops("not-pulsar")
    extract = ExtractConfig(
        zookeeper=stack.zookeeper,
        ledgers_root=clusters.ledgers_root,
        pulsar_metadata_zookeeper=clusters.store_a,
        other_pulsar_metadata_stores=(clusters.store_b, wrong),
        workers=1,
    )

    with pytest.raises(PulsarMetadataNotFound) as refused:
        run(JobConfig(extract=extract, out=tmp_path, min_age_seconds=0, bookkeeper_alone=False))

    assert wrong in str(refused.value) and "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH" in str(refused.value)
    assert not (tmp_path / "extract" / REFERENCES).exists()


def test_submit_with_none_needs_temporal_for_the_tripwire(
    stack: Any,
    clusters: Clusters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``none`` and ``--submit``: the tripwire lives in Temporal, so without a Temporal address the run is
    refused before it reads anything (exit 2), rather than submit without having read it."""
    from reconcile.cli import run_from_settings

    for name, value in stack.as_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LEDGER_DELETION_BOOKKEEPER_SHARED_WITH", "none")
    monkeypatch.setenv("LEDGER_DELETION_BK_LEDGERS_ROOT", clusters.ledgers_root)
    monkeypatch.setenv("LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER", clusters.store_a)
    for name in ("TEMPORAL_ADDRESS", "LEDGER_DELETION_TEMPORAL_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out"

    code = run_from_settings(master="local[2]", min_age="0", tenant=None, out=out, submit=True)

    assert code == 2
    stderr = " ".join(capsys.readouterr().err.split())
    assert "refused:" in stderr and "TEMPORAL_ADDRESS" in stderr
    assert not (out / "extract").exists()
