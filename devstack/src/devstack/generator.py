"""A synthetic Pulsar cluster of realistic shape, with a known set of orphans of every kind, at any size.

:func:`plan_cluster` is pure: from a :class:`ClusterSpec` it builds every znode and object the cluster
consists of (bytes made with the project's own encoders, exactly as a broker and BookKeeper write them)
together with the :class:`GroundTruth` of what the reconcile job must find. :func:`write_plan` then
writes the plan into a real ZooKeeper and S3 fast enough for 1,000,000 ledgers: ZooKeeper creates are
batched into ``multi`` transactions that are pipelined (many in flight on one session), objects are put
from a thread pool.

Shape (per managed ledger = topic partition): a handful of data ledgers (the last one OPEN), the oldest of
them offloaded on offloading topics (classic per-ledger keys; some with the BK copy already deleted; some as
streaming segments), one or two cursors with cursor ledgers (some keep their position inline, ledger -1),
a ``__compaction`` cursor with a compacted ledger on compacted topics, and one schema (1-2 ledgers) per
partitioned base topic. Orphans: data ledgers of live and of deleted topics, cursor, schema and compacted
ledgers, old OPEN ledgers, v2-format metadata, long (>= 2^32) ids, offloaded objects (classic and
segment keys), ledgers tagged with the pre-``pulsar/`` keys (report-only). Negatives that must never be
candidates: foreign ledgers (other application, no tags, v1 metadata, corrupt bytes), a stale offload uuid
of a still-referenced ledger, legacy-tagged ledgers, offloaded objects without ``ManagedLedgerName`` (from
a broker before apache/pulsar#14907, owner told only by the BK ledger's tag), and — written later by
:func:`plan_young_orphans` — orphans younger than the minimum age.

Objects carry the user metadata Pulsar writes (``BlobStoreManagedLedgerOffloader``): the format version
always; ``role`` (data|index) and ``ManagedLedgerName`` on classic offloads since apache/pulsar#14907; the
streaming offloader (segments) writes neither.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

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
from ledger_deletion.formats.offload_keys import (
    java_uuid_parts,
    ledger_object_keys,
    segment_object_keys,
)

__all__ = [
    "COMPACTION_CURSOR",
    "COMPACTED_TOPIC_LEDGER",
    "ClusterPlan",
    "ClusterSpec",
    "GroundTruth",
    "WriteStats",
    "plan_cluster",
    "plan_young_orphans",
    "write_plan",
]

COMPACTION_CURSOR = "__compaction"
COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"  # Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY
MANAGED_LEDGERS_ROOT = "/managed-ledgers"
SCHEMAS_ROOT = "/schemas"
OFFLOAD_DRIVER = "aws-s3"
_LONG_ID_BASE = 2**32  # LongZkLedgerIdGenerator hands out ids from HOB-0000000001 = 2^32 on
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class ClusterSpec:
    """What to generate. ``ledgers`` is the approximate number of BK ledger znodes (orphans included)."""

    ledgers: int
    seed: int = 7
    first_ledger_id: int = 10_000
    first_long_ledger_id: int = _LONG_ID_BASE + 1_000
    bucket: str = "pulsar-offload"
    tenants: tuple[str, ...] = ("public", "acme", "globex")
    namespaces_per_tenant: int = 3
    data_ledgers_per_topic: int = 6
    partitioned_fraction: float = 0.3
    partitions: int = 4
    offloading_fraction: float = 0.4  # of managed ledgers; their older ledgers are offloaded
    compacted_fraction: float = 0.1  # of managed ledgers
    orphan_fraction: float = 0.05  # of ledgers
    foreign_fraction: float = 0.01  # of ledgers
    now_ms: int = 0  # the clock of the simulated brokers (LedgerInfo timestamps); 0 = wall clock


@dataclass
class GroundTruth:
    """What a correct reconcile of the plan finds (ids and keys), by outcome."""

    bk_candidates: dict[int, str] = field(default_factory=dict)  # ledger id -> LedgerComponent value
    offload_candidates: set[tuple[str, int]] = field(default_factory=set)  # (uuid, ledger id)
    report_only_ledgers: set[int] = field(default_factory=set)  # compacted and legacy-tagged orphans
    report_only_objects: set[str] = field(default_factory=set)  # segment orphans, owner unknown, untagged
    excluded_ledgers: dict[int, str] = field(default_factory=dict)  # id -> reason (foreign, young, ...)
    excluded_objects: dict[str, str] = field(default_factory=dict)  # key -> reason
    referenced: set[int] = field(default_factory=set)
    # Of the offload candidates, the replaced attempts of ledgers still listed (their ids are referenced).
    replaced_offloads: set[tuple[str, int]] = field(default_factory=set)

    def merge(self, other: GroundTruth) -> None:
        self.bk_candidates.update(other.bk_candidates)
        self.offload_candidates |= other.offload_candidates
        self.report_only_ledgers |= other.report_only_ledgers
        self.report_only_objects |= other.report_only_objects
        self.excluded_ledgers.update(other.excluded_ledgers)
        self.excluded_objects.update(other.excluded_objects)
        self.referenced |= other.referenced
        self.replaced_offloads |= other.replaced_offloads


@dataclass
class ClusterPlan:
    """Everything to write. Paths are relative to the roots given to :func:`write_plan`."""

    ledgers: list[tuple[int, bytes]] = field(default_factory=list)
    managed_ledgers: list[tuple[str, bytes]] = field(default_factory=list)  # ML name -> ManagedLedgerInfo
    cursors: list[tuple[str, str, bytes]] = field(default_factory=list)  # ML name, cursor, ManagedCursorInfo
    schemas: list[tuple[str, bytes]] = field(default_factory=list)  # schema id -> SchemaLocator
    objects: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)  # key, size, user metadata
    touch_ledgers: list[int] = field(default_factory=list)  # existing ledgers to rewrite (fresh mtime)
    open_orphans: list[int] = field(default_factory=list)
    truth: GroundTruth = field(default_factory=GroundTruth)


class _Ids:
    """Ledger ids as BookKeeper hands them out, with the first ``reserve`` of each range kept for orphans.

    An orphan is a ledger its topic let go of (trimmed, a cursor or schema switched away from it), so its id
    is older than every ledger the topic still lists. The service keeps a request for a ledger newer than
    every listed one (a rollover in progress writes the store after it creates the ledger), so orphans drawn
    after the live ledgers would be kept, not deleted, which no real trim produces.
    """

    def __init__(self, first: int, first_long: int, reserve: int) -> None:
        self._orphan, self._orphan_floor = first + reserve, first
        self._orphan_long, self._orphan_long_floor = first_long + reserve, first_long
        self._next = first + reserve
        self._next_long = first_long + reserve

    def new(self) -> int:
        self._next += 1
        return self._next - 1

    def new_long(self) -> int:
        self._next_long += 1
        return self._next_long - 1

    def old(self) -> int:
        """An orphan's id: below every live one."""
        if self._orphan == self._orphan_floor:
            raise ValueError("more orphans than the range reserved for them")
        self._orphan -= 1
        return self._orphan

    def old_long(self) -> int:
        if self._orphan_long == self._orphan_long_floor:
            raise ValueError("more orphans than the range reserved for them")
        self._orphan_long -= 1
        return self._orphan_long


@dataclass
class _Topic:
    ml_name: str
    data: list[int]
    offloaded: bool
    compacted: bool
    classic: list[int] = field(
        default_factory=list
    )  # data ledgers whose metadata stores a classic offload uuid


class _Planner:
    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.rnd = random.Random(spec.seed)
        self.ids = _Ids(spec.first_ledger_id, spec.first_long_ledger_id, _orphan_count(spec) + 16)
        self.plan = ClusterPlan()
        self.now_ms = spec.now_ms or int(time.time() * 1000)
        self.topics: list[_Topic] = []
        self.schema_ids: list[str] = []

    # -- building blocks -------------------------------------------------------------------------------
    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rnd.getrandbits(128), version=4))

    def ledger(
        self, ledger_id: int, custom: dict[str, str], *, state: str = "CLOSED", version: int = 3
    ) -> int:
        closed = state == "CLOSED"
        entries = self.rnd.randint(1, 5000) if closed else 0
        length = entries * self.rnd.randint(200, 2000) if closed else 0
        data = build_pulsar_ledger_metadata(
            custom,
            format_version=version,
            state=state,  # type: ignore[arg-type]
            length=length,
            last_entry_id=entries - 1 if closed else -1,
            bookies=("bookie-0.bk:3181", "bookie-1.bk:3181", "bookie-2.bk:3181"),
            write_quorum=2,
            ack_quorum=2,
            ctoken=self.rnd.getrandbits(62) + 1,
        )
        self.plan.ledgers.append((ledger_id, data))
        return ledger_id

    def objects_for(self, keys: Iterable[str], ml_name: str | None) -> None:
        """Objects under ``keys`` (data, then index) as a classic offload by a broker since
        apache/pulsar#14907 writes them, with ``role`` and ``ManagedLedgerName``; ``ml_name`` None: as a
        broker before it, or the streaming offloader, writes them: the format version only."""
        for i, key in enumerate(keys):
            meta = {"s3managedledgeroffloaderformatversion": "1"}
            if ml_name is not None:
                meta.update({"role": "index" if i else "data", "ManagedLedgerName": ml_name})
            size = self.rnd.randint(64, 256) if i else self.rnd.randint(512, 2048)
            self.plan.objects.append((key, size, meta))

    # -- live topics -----------------------------------------------------------------------------------
    def topic(self, tenant: str, namespace: str, local: str, schema_id: str | None) -> None:
        ml_name = f"{tenant}/{namespace}/persistent/{local}"
        rnd = self.rnd
        offloaded = rnd.random() < self.spec.offloading_fraction
        compacted = rnd.random() < self.spec.compacted_fraction
        n_data = max(1, int(rnd.gauss(self.spec.data_ledgers_per_topic, 2)))
        info = ManagedLedgerInfo()
        data_ids: list[int] = []
        classic: list[int] = []
        n_offloaded = rnd.randint(1, max(1, n_data - 2)) if offloaded and n_data > 2 else 0
        for i in range(n_data):
            ledger_id = self.ids.new()
            data_ids.append(ledger_id)
            li = info.ledgerInfo.add(
                ledgerId=ledger_id,
                entries=rnd.randint(1, 5000),
                size=rnd.randint(10_000, 50_000_000),
                timestamp=self.now_ms - (n_data - i) * 3_600_000,
            )
            last = i == n_data - 1
            bk_deleted = False
            if i < n_offloaded:
                ctx = li.offloadContext
                ctx.complete = True
                ctx.timestamp = li.timestamp + 60_000
                ctx.driverMetadata.name = OFFLOAD_DRIVER
                for key, value in (
                    ("bucket", self.spec.bucket),
                    ("region", "us-east-1"),
                    ("managedLedgerOffloadDriver", "AWS_S3"),
                    ("serviceEndpoint", ""),
                ):
                    ctx.driverMetadata.properties.add(key=key, value=value)
                if rnd.random() < 0.15:  # streaming offload: one segment, keys <uuid>, <uuid>-index
                    seg_uuid = self.uuid()
                    msb, lsb = java_uuid_parts(seg_uuid)
                    ctx.offloadSegment.add(
                        uidMsb=msb,
                        uidLsb=lsb,
                        complete=True,
                        assignedTimestamp=li.timestamp,
                        offloadedTimestamp=ctx.timestamp,
                    )
                    self.objects_for(segment_object_keys(seg_uuid), None)  # no owner tags on segments
                else:
                    off_uuid = self.uuid()
                    ctx.uidMsb, ctx.uidLsb = java_uuid_parts(off_uuid)
                    self.objects_for(ledger_object_keys(off_uuid, ledger_id), ml_name)
                    classic.append(ledger_id)
                bk_deleted = rnd.random() < 0.5  # past managedLedgerOffloadDeletionLagMs
                ctx.bookkeeperDeleted = bk_deleted
            if not bk_deleted:
                self.ledger(
                    ledger_id, managed_ledger_custom_metadata(ml_name), state="OPEN" if last else "CLOSED"
                )
        self.plan.truth.referenced.update(data_ids)
        self.plan.managed_ledgers.append((ml_name, serialize_managed_ledger_info(info)))
        # cursors
        for c in range(rnd.choice((1, 1, 2))):
            cursor = f"sub-{c}" if c else "my-subscription"
            mark = rnd.choice(data_ids)
            if rnd.random() < 0.2:  # position kept inline in the metadata store
                cursor_ledger = -1
            else:
                cursor_ledger = self.ledger(
                    self.ids.new(), cursor_custom_metadata(ml_name, cursor), state="OPEN"
                )
                self.plan.truth.referenced.add(cursor_ledger)
            ci = ManagedCursorInfo(
                cursorsLedgerId=cursor_ledger,
                markDeleteLedgerId=mark,
                markDeleteEntryId=5,
                lastActive=self.now_ms,
            )
            self.plan.cursors.append((ml_name, cursor, serialize_managed_cursor_info(ci)))
        if compacted:
            topic = "persistent://" + ml_name.replace("/persistent/", "/")
            compacted_id = self.ledger(
                self.ids.new(),
                {
                    "application": "pulsar",
                    "component": "compacted-ledger",
                    "pulsar/compactedTopic": topic,
                    "pulsar/compactedTo": "\x08\x01\x10\x02",
                },
            )
            self.plan.truth.referenced.add(compacted_id)
            ci = ManagedCursorInfo(cursorsLedgerId=-1, markDeleteLedgerId=data_ids[-1], markDeleteEntryId=0)
            ci.properties.add(name=COMPACTED_TOPIC_LEDGER, value=compacted_id)
            self.plan.cursors.append((ml_name, COMPACTION_CURSOR, serialize_managed_cursor_info(ci)))
        self.topics.append(_Topic(ml_name, data_ids, offloaded, compacted, classic))

    def schema(self, schema_id: str) -> None:
        locator = SchemaLocator()
        versions = self.rnd.choice((1, 1, 2))
        for v in range(versions):
            ledger_id = self.ledger(self.ids.new(), schema_custom_metadata(schema_id))
            self.plan.truth.referenced.add(ledger_id)
            entry = locator.index.add(version=v, hash=bytes(self.rnd.getrandbits(8) for _ in range(8)))
            entry.position.ledgerId = ledger_id
            entry.position.entryId = 0
        locator.info.CopyFrom(locator.index[-1])
        self.plan.schemas.append((schema_id, serialize_schema_locator(locator)))
        self.schema_ids.append(schema_id)

    # -- orphans ---------------------------------------------------------------------------------------
    def orphan_data(self, *, long: bool = False, version: int = 3, state: str = "CLOSED") -> None:
        topic = self.rnd.choice(self.topics)
        ledger_id = self.ids.old_long() if long else self.ids.old()
        # A long id is newer than every (short) id the live topics list, so a live topic would keep it
        # (newer-than-listed): it is a deleted topic's of the same namespace, whose metadata is gone.
        ml_name = topic.ml_name.rsplit("/", 1)[0] + f"/gone-{ledger_id}" if long else topic.ml_name
        self.ledger(ledger_id, managed_ledger_custom_metadata(ml_name), state=state, version=version)
        self.plan.truth.bk_candidates[ledger_id] = "MANAGED_LEDGER"
        if state == "OPEN":
            self.plan.open_orphans.append(ledger_id)

    def orphan_cursor(self) -> None:
        topic = self.rnd.choice(self.topics)
        ledger_id = self.ledger(self.ids.old(), cursor_custom_metadata(topic.ml_name, "my-subscription"))
        self.plan.truth.bk_candidates[ledger_id] = "MANAGED_CURSOR"

    def orphan_schema(self) -> None:
        schema_id = self.rnd.choice(self.schema_ids)
        ledger_id = self.ledger(self.ids.old(), schema_custom_metadata(schema_id))
        self.plan.truth.bk_candidates[ledger_id] = "SCHEMA_STORAGE"

    def orphan_compacted(self) -> None:
        topic = self.rnd.choice(self.topics)
        ledger_id = self.ledger(
            self.ids.new(),
            {
                "application": "pulsar",
                "component": "compacted-ledger",
                "pulsar/compactedTopic": "persistent://" + topic.ml_name.replace("/persistent/", "/"),
            },
        )
        self.plan.truth.report_only_ledgers.add(ledger_id)

    def orphan_legacy(self) -> None:
        """Orphans tagged by an early LedgerMetadataUtils (keys without ``pulsar/``): the deletion service
        does not accept those tags, so they are report-only, never candidates."""
        topic = self.rnd.choice(self.topics)
        base = {"application": "pulsar", "component": "managed-ledger"}
        for custom in (
            {**base, "psr/managed-ledger": topic.ml_name},
            {**base, "psr/managed-ledger": topic.ml_name, "psr/cursor": "my-subscription"},
            {"application": "pulsar", "component": "schema", "schemaId": self.rnd.choice(self.schema_ids)},
            {
                **base,
                "compactedTopic": "persistent://" + topic.ml_name.replace("/persistent/", "/"),
                "compactedTo": "\x08\x01\x10\x02",
            },
        ):
            self.plan.truth.report_only_ledgers.add(self.ledger(self.ids.new(), custom))

    def deleted_topic(self, tenant: str, namespace: str) -> None:
        """A topic deleted while BK/S3 deletes failed: its ledgers, cursor ledger, offloaded data remain."""
        ml_name = f"{tenant}/{namespace}/persistent/deleted-{self.rnd.getrandbits(32):08x}"
        for _ in range(self.rnd.randint(1, 3)):
            ledger_id = self.ledger(self.ids.new(), managed_ledger_custom_metadata(ml_name))
            self.plan.truth.bk_candidates[ledger_id] = "MANAGED_LEDGER"
        ledger_id = self.ledger(self.ids.new(), cursor_custom_metadata(ml_name, "my-subscription"))
        self.plan.truth.bk_candidates[ledger_id] = "MANAGED_CURSOR"
        self.orphan_offload(ml_name)

    def orphan_offload(self, ml_name: str | None = None, *, with_bk_copy: bool = False) -> None:
        """Objects of a ledger trimmed away (BK znode gone, S3 delete failed)."""
        topic_ml = ml_name or self.rnd.choice(self.topics).ml_name
        ledger_id = self.ids.old()
        off_uuid = self.uuid()
        self.objects_for(ledger_object_keys(off_uuid, ledger_id), topic_ml)
        self.plan.truth.offload_candidates.add((off_uuid, ledger_id))
        if with_bk_copy:
            self.ledger(ledger_id, managed_ledger_custom_metadata(topic_ml))
            self.plan.truth.bk_candidates[ledger_id] = "MANAGED_LEDGER"

    def special_objects(self) -> None:
        # Owner unknown: no ManagedLedgerName metadata and no BK ledger to tell the topic.
        off_uuid, ledger_id = self.uuid(), self.ids.new()
        keys = ledger_object_keys(off_uuid, ledger_id)
        self.objects_for(keys, None)
        self.plan.truth.report_only_objects.update(keys)
        # Segment orphan: the key carries no ledger id (nor the objects any owner tag).
        keys = segment_object_keys(self.uuid())
        self.rnd.choice(self.topics)  # drawn as ever, so that everything generated after it stays the same
        self.objects_for(keys, None)
        self.plan.truth.report_only_objects.update(keys)
        # Objects under some uuid of the ledger the topic writes to: listed without an offload context,
        # so nothing says which uuid its offload would be read from. Kept.
        topic = self.rnd.choice(self.topics)
        keys = ledger_object_keys(self.uuid(), topic.data[-1])
        self.objects_for(keys, topic.ml_name)
        for key in keys:
            self.plan.truth.excluded_objects[key] = "ledger-id-referenced"
        # Not an offload object at all.
        self.objects_for(["README.txt"], None)
        self.plan.truth.excluded_objects["README.txt"] = "unrecognized-key"

    def replaced_offload(self) -> None:
        """Objects of a replaced offload attempt of a ledger still listed: its metadata stores the newer
        attempt's uuid (a failed attempt whose cleanup the broker missed). Nothing reads them: a candidate."""
        offloading = [topic for topic in self.topics if topic.classic]
        if not offloading:
            return
        topic = self.rnd.choice(offloading)
        ledger_id, stale = self.rnd.choice(topic.classic), self.uuid()
        self.objects_for(ledger_object_keys(stale, ledger_id), topic.ml_name)
        self.plan.truth.offload_candidates.add((stale, ledger_id))
        self.plan.truth.replaced_offloads.add((stale, ledger_id))

    def untagged_offload(self) -> None:
        """Orphan objects offloaded by a broker before apache/pulsar#14907 (no ManagedLedgerName, no role),
        with the BK copy of the ledger still there to tell the topic: the service cannot prove the objects
        are that topic's and would skip the request, so they are report-only (``objects-untagged``); the BK
        ledger itself is an ordinary candidate."""
        topic = self.rnd.choice(self.topics)
        ledger_id = self.ids.old()
        keys = ledger_object_keys(self.uuid(), ledger_id)
        self.objects_for(keys, None)
        self.plan.truth.report_only_objects.update(keys)
        self.ledger(ledger_id, managed_ledger_custom_metadata(topic.ml_name))
        self.plan.truth.bk_candidates[ledger_id] = "MANAGED_LEDGER"

    def broken_owner(self) -> None:
        """A managed ledger whose record does not decode: nothing it may reference can be judged."""
        tenant, namespace = self.topics[0].ml_name.split("/")[:2]
        ml_name = f"{tenant}/{namespace}/persistent/broken-{self.rnd.getrandbits(32):08x}"
        # A LedgerInfo without its required ledgerId: protobuf-java (the broker) would refuse it too.
        self.plan.managed_ledgers.append((ml_name, b"\x0a\x02\x10\x01"))
        ledger_id = self.ledger(self.ids.new(), managed_ledger_custom_metadata(ml_name))
        self.plan.truth.excluded_ledgers[ledger_id] = "owner-metadata-unreadable"
        keys = ledger_object_keys(self.uuid(), self.ids.new())
        self.objects_for(keys, ml_name)
        for key in keys:
            self.plan.truth.excluded_objects[key] = "owner-metadata-unreadable"

    def foreign(self, kind: int) -> None:
        ledger_id = self.ids.new()
        if kind == 0:
            self.ledger(ledger_id, {"application": "bookkeeper-table-service", "component": "range"})
            self.plan.truth.excluded_ledgers[ledger_id] = "not-pulsar"
        elif kind == 1:
            self.ledger(ledger_id, {})
            self.plan.truth.excluded_ledgers[ledger_id] = "no-application-tag"
        elif kind == 2:  # BookKeeper v1 text format: no custom metadata at all
            body = "2\n3\n4096\n0\tbookie-0.bk:3181\tbookie-1.bk:3181\tbookie-2.bk:3181\n99\tCLOSED\n"
            self.plan.ledgers.append((ledger_id, b"BookieMetadataFormatVersion\t1\n" + body.encode()))
            self.plan.truth.excluded_ledgers[ledger_id] = "no-application-tag"
        else:
            self.plan.ledgers.append((ledger_id, b"\x00garbage, not ledger metadata"))
            self.plan.truth.excluded_ledgers[ledger_id] = "unparseable-metadata"


def _orphan_count(spec: ClusterSpec) -> int:
    return max(12, int(spec.ledgers * spec.orphan_fraction))


def plan_cluster(spec: ClusterSpec) -> ClusterPlan:
    """Build the whole cluster in memory (deterministic for a given spec)."""
    p = _Planner(spec)
    rnd = p.rnd
    n_orphans = _orphan_count(spec)
    n_foreign = max(4, int(spec.ledgers * spec.foreign_fraction))
    live_budget = max(1, spec.ledgers - n_orphans - n_foreign)
    namespaces = [(t, f"ns-{n}") for t in spec.tenants for n in range(spec.namespaces_per_tenant)]
    t = 0
    while len(p.plan.ledgers) < live_budget:
        tenant, namespace = namespaces[t % len(namespaces)]
        base = f"topic-{t:07d}"
        if rnd.random() < spec.partitioned_fraction:
            for part in range(spec.partitions):
                p.topic(tenant, namespace, f"{base}-partition-{part}", None)
        else:
            p.topic(tenant, namespace, base, None)
        if rnd.random() < 0.5:
            p.schema(f"{tenant}/{namespace}/{base}")
        t += 1
    if not p.schema_ids:
        p.schema(f"{namespaces[0][0]}/{namespaces[0][1]}/topic-0000000")
    # Deleted topics' namespaces still exist: Pulsar removes /managed-ledgers/<namespace> only with the
    # namespace (clearNamespacePersistence), and a namespace no store has keeps its ledgers (knows_namespace).
    # The plan writes no empty parents, so they are drawn from the namespaces that have a live topic.
    live = sorted({(t.ml_name.split("/")[0], t.ml_name.split("/")[1]) for t in p.topics})
    # Every kind at least once, then the rest of the budget by weight.
    fixed: list[Callable[[], None]] = [
        lambda: p.orphan_data(),
        lambda: p.orphan_data(long=True),
        lambda: p.orphan_data(version=2),
        lambda: p.orphan_data(state="OPEN"),
        p.orphan_cursor,
        p.orphan_schema,
        p.orphan_compacted,
        lambda: p.deleted_topic(*live[-1]),
        lambda: p.orphan_offload(),
        lambda: p.orphan_offload(with_bk_copy=True),
    ]
    for make in fixed:
        make()
    weighted: list[tuple[float, Callable[[], None]]] = [
        (0.45, lambda: p.orphan_data()),
        (0.05, lambda: p.orphan_data(long=True)),
        (0.15, p.orphan_cursor),
        (0.08, p.orphan_schema),
        (0.04, p.orphan_compacted),
        (0.05, lambda: p.deleted_topic(*rnd.choice(live))),
        (0.18, lambda: p.orphan_offload()),
    ]
    weights = [w for w, _ in weighted]
    for _ in range(n_orphans - len(fixed)):
        rnd.choices(weighted, weights)[0][1]()
    for i in range(n_foreign):
        p.foreign(i % 4)
    p.special_objects()
    p.broken_owner()
    p.orphan_legacy()  # late: the ids and choices of everything above stay what they were
    p.untagged_offload()  # last, for the same reason
    p.replaced_offload()  # after it, for the same reason
    return p.plan


def plan_young_orphans(spec: ClusterSpec, plan: ClusterPlan) -> ClusterPlan:
    """Orphans written after the cut-off, and a rewrite of an old OPEN orphan (fresh mtime): no candidates.

    Ids continue after the ones ``plan`` used (with a gap), so both plans can be written into one cluster.
    """
    used = [i for i, _ in plan.ledgers] + [i for _, i in plan.truth.offload_candidates]
    young_spec = ClusterSpec(
        ledgers=0,
        seed=spec.seed + 1,
        first_ledger_id=max(i for i in used if i < _LONG_ID_BASE) + 1000,
        first_long_ledger_id=max((i for i in used if i >= _LONG_ID_BASE), default=spec.first_long_ledger_id)
        + 1000,
        bucket=spec.bucket,
        now_ms=spec.now_ms,
    )
    p = _Planner(young_spec)
    ml_names = [name for name, _ in plan.managed_ledgers]
    p.topics = [_Topic(name, [], False, False) for name in ml_names[:5]]
    for kind in ("data", "open", "cursor", "offload"):
        if kind == "offload":
            p.orphan_offload()
        elif kind == "cursor":
            p.orphan_cursor()
        else:
            p.orphan_data(state="OPEN" if kind == "open" else "CLOSED")
    young = p.plan
    young.truth.excluded_ledgers.update({i: "too-young" for i in young.truth.bk_candidates})
    for off_uuid, ledger_id in young.truth.offload_candidates:
        for key in ledger_object_keys(off_uuid, ledger_id):
            young.truth.excluded_objects[key] = "too-young"
    young.truth.bk_candidates.clear()
    young.truth.offload_candidates.clear()
    # An old OPEN orphan whose znode is rewritten now (an ensemble change): still written to, never deleted.
    open_old = plan.open_orphans[0] if plan.open_orphans else None
    if open_old is not None:
        plan.truth.bk_candidates.pop(open_old, None)
        young.touch_ledgers.append(open_old)
        young.truth.excluded_ledgers[open_old] = "open-recently-modified"
    return young


# ---------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------


@dataclass
class WriteStats:
    znodes: int = 0
    objects: int = 0
    seconds: float = 0.0


SPECIAL_BK_ZNODES = (
    "LAYOUT",
    "INSTANCEID",
    "available/readonly",
    "cookies",
    "underreplication/ledgers",
    "idgen",
    "idgen-long",
)


def write_plan(
    zk: Any,
    s3: Any,
    plan: ClusterPlan,
    *,
    bucket: str,
    ledgers_root: str = "/ledgers",
    batch: int = 400,
    in_flight: int = 16,
    s3_threads: int = 32,
    progress: Callable[[str, int], None] | None = None,
) -> WriteStats:
    """Write a plan into ZooKeeper (``zk``: a started ``KazooClient``) and S3 (``s3``: a boto3 client).

    Znodes that already exist are an error (write each plan once into a fresh root or chroot).
    ``progress(stage, n)`` is called as batches complete.
    """
    started = time.monotonic()
    stats = WriteStats()
    report = progress or (lambda _stage, _n: None)
    root = ledgers_root.rstrip("/")
    for special in SPECIAL_BK_ZNODES:
        zk.ensure_path(f"{root}/{special}")
    if not zk.exists(f"{root}/LAYOUT", watch=None) or zk.get(f"{root}/LAYOUT")[0] == b"":
        zk.set(f"{root}/LAYOUT", b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n")

    ledger_nodes = [(ledger_path(i, root), data) for i, data in plan.ledgers]
    stats.znodes += _create_all(zk, ledger_nodes, batch, in_flight, lambda n: report("bk-ledgers", n))
    if plan.touch_ledgers:
        for ledger_id in plan.touch_ledgers:
            path = ledger_path(ledger_id, root)
            data, _ = zk.get(path)
            zk.set(path, data)
    ml_nodes = [(f"{MANAGED_LEDGERS_ROOT}/{name}", data) for name, data in plan.managed_ledgers]
    stats.znodes += _create_all(zk, ml_nodes, batch, in_flight, lambda n: report("managed-ledgers", n))
    cursor_nodes = [(f"{MANAGED_LEDGERS_ROOT}/{name}/{c}", data) for name, c, data in plan.cursors]
    stats.znodes += _create_all(
        zk, cursor_nodes, batch, in_flight, lambda n: report("cursors", n), ensure_parents=False
    )
    schema_nodes = [(f"{SCHEMAS_ROOT}/{sid}", data) for sid, data in plan.schemas]
    stats.znodes += _create_all(zk, schema_nodes, batch, in_flight, lambda n: report("schemas", n))
    stats.objects = _put_all(s3, bucket, plan.objects, s3_threads, lambda n: report("objects", n))
    stats.seconds = time.monotonic() - started
    return stats


def _create_all(
    zk: Any,
    nodes: Sequence[tuple[str, bytes]],
    batch: int,
    in_flight: int,
    done: Callable[[int], None],
    ensure_parents: bool = True,
) -> int:
    """Create znodes (parents first, as plain creates; leaves in pipelined ``multi`` transactions)."""
    parents = sorted({path.rsplit("/", 1)[0] for path, _ in nodes}, key=lambda p: p.count("/"))
    if not ensure_parents:
        parents = []
    known: set[str] = set()
    for parent in parents:
        if parent not in known:
            zk.ensure_path(parent)
            # ensure_path created every ancestor too
            part = parent
            while part and part not in known:
                known.add(part)
                part = part.rsplit("/", 1)[0]
    # Parents that are themselves nodes of this list (ML znodes holding cursors) are created by the
    # ensure_path above with empty data; set their data instead of creating them.
    pending: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    count = 0

    def check(result: Any) -> None:
        nonlocal count
        try:
            outcome = result.get()
        except Exception as exc:  # noqa: BLE001 - collected and raised below
            with lock:
                errors.append(exc)
            return
        bad = [r for r in outcome if isinstance(r, BaseException)]
        with lock:
            errors.extend(bad)
            count += len(outcome)

    to_set = [(path, data) for path, data in nodes if path in known]
    to_create = [(path, data) for path, data in nodes if path not in known]
    for path, data in to_set:
        zk.set(path, data)
    for start in range(0, len(to_create), batch):
        txn = zk.transaction()
        for path, data in to_create[start : start + batch]:
            txn.create(path, data)
        pending.append(txn.commit_async())
        if len(pending) >= in_flight:
            first = pending.pop(0)
            check(first)
            done(count)
    for result in pending:
        check(result)
    done(count)
    if errors:
        raise RuntimeError(f"{len(errors)} znode creates failed, first: {errors[0]!r}")
    return len(nodes)


def _put_all(
    s3: Any,
    bucket: str,
    objects: Sequence[tuple[str, int, dict[str, str]]],
    threads: int,
    done: Callable[[int], None],
) -> int:
    body_cache: dict[int, bytes] = {}

    def put(item: tuple[str, int, dict[str, str]]) -> None:
        key, size, meta = item
        body = body_cache.get(size)
        if body is None:
            body = body_cache.setdefault(size, bytes(size))
        s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for n, _ in enumerate(pool.map(put, objects), start=1):
            if n % 1000 == 0:
                done(n)
    done(len(objects))
    return len(objects)
