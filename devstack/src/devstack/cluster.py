"""A simulated Pulsar cluster: real metadata in ZooKeeper and real objects in S3, written as a broker would.

There is no broker and no bookie here, only what they leave behind and what the deletion service reads:

* ``/managed-ledgers/<ml name>`` (``ManagedLedgerInfo``) and its cursor children (``ManagedCursorInfo``);
* ``/schemas/<schema id>`` (``SchemaLocator``) and ``/admin/partitioned-topics/...`` (JSON);
* one BookKeeper ledger znode per ledger at ``ledger_path(id)`` with Pulsar's custom metadata tags;
* for offloaded ledgers, the data and index objects in the offload bucket (keys from the OffloadContext uuid).

Orphans are born the way they are in production: :meth:`SimulatedCluster.delete_topic` removes the metadata
but leaves storage, and :meth:`SimulatedCluster.trim` publishes PIP-186 requests and then updates metadata
(the mark phase) without deleting anything. Dev/test tooling, not product code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ledger_deletion.formats.bk_metadata import (
    CUSTOM_APPLICATION,
    CUSTOM_COMPACTED_TO,
    CUSTOM_COMPACTED_TOPIC,
    CUSTOM_COMPONENT,
    build_pulsar_ledger_metadata,
    cursor_custom_metadata,
    managed_ledger_custom_metadata,
    parse_ledger_metadata,
    schema_custom_metadata,
    serialize_ledger_metadata,
)
from ledger_deletion.formats.bk_paths import DEFAULT_LEDGERS_ROOT, ledger_path
from ledger_deletion.formats.managed_ledger import (
    ledger_info_to_request_context,
    managed_ledger_name,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    serialize_managed_cursor_info,
    serialize_managed_ledger_info,
    serialize_schema_locator,
)
from ledger_deletion.formats.offload_keys import (
    java_uuid_parts,
    object_role,
    offload_keys_for_context,
    offload_uuid,
    segment_object_keys,
)
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.formats.proto import SchemaStorageFormat_pb2 as schema_pb
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    PendingDeleteLedgerInfo,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

OFFLOAD_DRIVER = "aws-s3"
# The userMetadata PulsarService hands the offloader factory (keys lower-cased there): software version and
# git sha (LedgerOffloader.METADATA_SOFTWARE_*_KEY) and, since apache/pulsar#14907, the cluster name.
OFFLOADER_USER_METADATA = {
    "s3managedledgeroffloadersoftwareversion": "3.0.0-simulated",
    "s3managedledgeroffloadersoftwaregitsha": "0000000",
    "pulsarclustername": "simulated",
}
COMPACTION_CURSOR = "__compaction"  # Compactor.COMPACTION_SUBSCRIPTION
COMPACTED_TOPIC_LEDGER_PROPERTY = "CompactedTopicLedger"
_MINUTE_MS = 60_000
# The ledgers a simulated cluster writes are old ones, as those a real cluster trims: each was created this
# long before its LedgerInfo's timestamp (the others: before now). Their metadata carries that ctime, as
# BookKeeper writes it with storeSystemTimeAsLedgerCreationTime; :meth:`SimulatedCluster.roll_over` writes a
# brand-new one.
LEDGER_LIFETIME_MS = 10 * _MINUTE_MS


def _topic(name: str) -> str:
    """``[persistent://]tenant/ns/local`` -> ``tenant/ns/local`` (the form requests carry)."""
    return name.removeprefix("persistent://")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _message_id_data(ledger_id: int, entry_id: int) -> bytes:
    """``MessageIdData{ledgerId, entryId}`` as ``MessageId#toByteArray`` writes it (two uint64 varints)."""

    def varint(tag: int, value: int) -> bytes:
        out = bytearray([tag])
        value &= 2**64 - 1
        while True:
            byte, value = value & 0x7F, value >> 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)

    return varint(0x08, ledger_id) + varint(0x10, entry_id)


@dataclass(frozen=True)
class SimulatedTopic:
    """What :meth:`SimulatedCluster.create_topic` wrote."""

    name: str  # tenant/ns/local
    managed_ledger_name: str
    ledgers: dict[int, LedgerInfo]  # the request ``context`` of each ledger, in metadata order


class SimulatedCluster:
    """Writes (and inspects) the metadata and storage of a Pulsar cluster that does not exist."""

    def __init__(
        self,
        zk: KazooClient,
        s3: S3Client,
        *,
        bucket: str,
        ledgers_root: str = DEFAULT_LEDGERS_ROOT,
        region: str = "us-east-1",
        metadata_root: str = "",
    ) -> None:
        self.zk = zk
        # Where this cluster's own metadata store is (``/managed-ledgers``, ``/schemas``, ``/admin``): a
        # ZooKeeper chroot of its own for a second cluster sharing the first one's BookKeeper (ledgers_root),
        # as ``PulsarClusterMetadataSetup --existing-bk-metadata-service-uri`` sets one up.
        self.metadata_root = metadata_root.rstrip("/")
        self.s3 = s3
        self.bucket = bucket
        self.ledgers_root = ledgers_root
        self.region = region
        # Offload contexts written by this instance, so keys stay known after the metadata is gone.
        self._offloads: dict[int, OffloadContext] = {}
        # Everything this instance wrote, for cleanup(): tests share one ZooKeeper and one bucket.
        self._znodes: set[str] = set()
        self._objects: set[tuple[str, str]] = set()

    # --- ids -----------------------------------------------------------------------------------------------

    def new_ledger_ids(self, count: int = 1) -> list[int]:
        """Fresh ledger ids, allocated as BookKeeper's legacy id generator does.

        An ephemeral-sequential znode ``<root>/idgen/ID-<seq>`` is created and deleted; its sequence number
        is the id. ZooKeeper keeps the counter, so ids never repeat across processes or restarts.
        """
        ids: list[int] = []
        for _ in range(count):
            path = self.zk.create(
                f"{self.ledgers_root}/idgen/ID-", b"", ephemeral=True, sequence=True, makepath=True
            )
            self.zk.delete(path)
            ids.append(int(path.rsplit("-", 1)[1]))
        return ids

    # --- topics --------------------------------------------------------------------------------------------

    def create_topic(
        self,
        topic_name: str,
        ledger_ids: Iterable[int],
        *,
        offloaded: Collection[int] = (),
        segments: Mapping[int, int] | None = None,
        bookkeeper_deleted: Collection[int] = (),
        bk_copy_left: Collection[int] = (),
        offload_failed: Collection[int] = (),
        entries: int = 100,
        entry_size: int = 1024,
        metadata_version: int = 3,
        compression: str = "NONE",
        partitions_of: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> SimulatedTopic:
        """Write a topic's managed-ledger info plus the BK znodes and offloaded objects of its ledgers.

        Args:
            topic_name: ``[persistent://]tenant/ns/local`` (local name in its encoded form).
            ledger_ids: the topic's ledgers, oldest first (the last one is the "current" ledger).
            offloaded: ledgers offloaded the classic way: OffloadContext with a uuid, ``complete=True``,
                driver ``aws-s3`` (bucket, region, endpoint) and the objects ``<uuid>-ledger-<id>[-index]``.
            segments: ledger id -> number of streaming-offload segments: one OffloadSegment (own uuid,
                objects ``<uuid>`` and ``<uuid>-index``) per segment, no context uuid.
            bookkeeper_deleted: offloaded ledgers whose BK copy is already gone (``bookkeeperDeleted=true``,
                no znode), as after ``managedLedgerOffloadDeletionLagMs``.
            bk_copy_left: of those, the ones whose BK copy is still there: the broker's own delete of it
                failed after it stored ``bookkeeperDeleted``, and it never tries again.
            offload_failed: offloaded ledgers whose (classic) attempt failed part-way: ``complete=false``,
                its objects written; :meth:`replace_offload` starts the next attempt.
            metadata_version: BK ledger metadata format (2 = TextFormat, 3 = binary).
            compression: ManagedLedgerInfo compression (NONE, LZ4, ZLIB, ZSTD).
            partitions_of: this topic is a partition of that partitioned topic; its partitioned metadata
                is created, or grown to cover this partition's index.
            properties: managed-ledger properties.

        Re-creating an existing topic replaces its ledger list.
        """
        name = _topic(topic_name)
        ml_name = managed_ledger_name(name)
        ids = list(ledger_ids)
        segment_counts = dict(segments or {})
        unknown = (set(offloaded) | set(segment_counts) | set(bookkeeper_deleted)) - set(ids)
        if unknown:
            raise ValueError(f"ledger(s) {sorted(unknown)} are not among the topic's ledgers")
        if not set(offload_failed) <= set(offloaded) - set(bookkeeper_deleted):
            raise ValueError("a failed offload is a classic one whose BK copy is still the one read")
        if not set(bk_copy_left) <= set(bookkeeper_deleted):
            raise ValueError("a BK copy left behind is one the broker marked bookkeeperDeleted")
        if partitions_of is not None:
            index = int(name.rsplit("-partition-", 1)[1]) if "-partition-" in name else 0
            self.create_partitioned_topic(partitions_of, index + 1, grow_only=True)

        now = _now_ms()
        info = ml_pb.ManagedLedgerInfo()
        ledgers: dict[int, LedgerInfo] = {}
        for age, ledger_id in enumerate(reversed(ids)):
            # Older ledgers have older timestamps (one minute apart), as successive rollovers would leave.
            created = now - age * _MINUTE_MS
            li = ml_pb.ManagedLedgerInfo.LedgerInfo(
                ledgerId=ledger_id, entries=entries, size=entries * entry_size, timestamp=created
            )
            if ledger_id in offloaded or ledger_id in segment_counts:
                li.offloadContext.CopyFrom(
                    self._offload(
                        ml_name,
                        ledger_id,
                        classic=ledger_id in offloaded,
                        segment_count=segment_counts.get(ledger_id, 0),
                        entries=entries,
                        bookkeeper_deleted=ledger_id in bookkeeper_deleted,
                        timestamp=created,
                        complete=ledger_id not in offload_failed,
                    )
                )
            if ledger_id not in bookkeeper_deleted or ledger_id in bk_copy_left:
                self._put(
                    ledger_path(ledger_id, self.ledgers_root),
                    build_pulsar_ledger_metadata(
                        managed_ledger_custom_metadata(ml_name),
                        format_version=metadata_version,
                        length=entries * entry_size,
                        last_entry_id=entries - 1,
                        ctime=created - LEDGER_LIFETIME_MS,
                    ),
                )
            info.ledgerInfo.insert(0, li)
        for key, value in (properties or {}).items():
            info.properties.add(key=key, value=value)
        for li in info.ledgerInfo:
            ledgers[li.ledgerId] = ledger_info_to_request_context(li)
        self._put(self._ml_path(name), serialize_managed_ledger_info(info, compression))
        return SimulatedTopic(name=name, managed_ledger_name=ml_name, ledgers=ledgers)

    def _offload(
        self,
        ml_name: str,
        ledger_id: int,
        *,
        classic: bool,
        segment_count: int,
        entries: int,
        bookkeeper_deleted: bool,
        timestamp: int,
        complete: bool = True,
    ) -> ml_pb.OffloadContext:
        driver = ml_pb.OffloadDriverMetadata(
            name=OFFLOAD_DRIVER,
            properties=[
                # TieredStorageConfiguration#getOffloadDriverMetadata: provider, bucket, region, endpoint.
                ml_pb.KeyValue(key="managedLedgerOffloadDriver", value=OFFLOAD_DRIVER),
                ml_pb.KeyValue(key="bucket", value=self.bucket),
                ml_pb.KeyValue(key="region", value=self.region),
                ml_pb.KeyValue(key="serviceEndpoint", value=str(self.s3.meta.endpoint_url or "")),
            ],
        )
        ctx = ml_pb.OffloadContext(
            complete=complete,
            bookkeeperDeleted=bookkeeper_deleted,
            timestamp=timestamp,
            driverMetadata=driver,
        )
        if classic:
            ctx.uidMsb, ctx.uidLsb = java_uuid_parts(str(uuid.uuid4()))
        per_segment = max(1, entries // max(1, segment_count))
        for index in range(segment_count):
            segment = ctx.offloadSegment.add(
                complete=True,
                assignedTimestamp=timestamp,
                offloadedTimestamp=timestamp + 1000,
                endEntryId=min(entries, (index + 1) * per_segment) - 1,
                driverMetadata=driver,
            )
            segment.uidMsb, segment.uidLsb = java_uuid_parts(str(uuid.uuid4()))
        context = ledger_info_to_request_context(
            ml_pb.ManagedLedgerInfo.LedgerInfo(ledgerId=ledger_id, offloadContext=ctx)
        ).offload_context
        assert context is not None  # just built with an offloadContext
        self._offloads[ledger_id] = context
        segment_keys = {
            key
            for seg in context.offload_segment
            for key in segment_object_keys(offload_uuid(seg.uid_msb, seg.uid_lsb))
        }
        for bucket, key in offload_keys_for_context(context, ledger_id, self.bucket):
            role = object_role(key)
            self._objects.add((bucket, key))
            # BlobStoreManagedLedgerOffloader's blob user metadata (S3 lower-cases the keys anyway): every
            # object gets the offloader's userMetadata and the format version (DataBlockUtils#addVersionInfo);
            # a classic offload adds role and the ManagedLedgerName extraMetadata (apache/pulsar#14907); a
            # streaming-offload segment gets nothing more (it may hold several ledgers).
            metadata = {**OFFLOADER_USER_METADATA, "s3managedledgeroffloaderformatversion": "1"}
            if key not in segment_keys:
                metadata |= {"ManagedLedgerName": ml_name, "role": role}
            self.s3.put_object(
                Bucket=bucket,
                Key=key,
                Body=f"simulated {role} block of ledger {ledger_id}\n".encode(),
                Metadata=metadata,
            )
        return ctx

    def replace_offload(
        self, topic: str, ledger_id: int, *, complete: bool = False
    ) -> PendingDeleteLedgerInfo:
        """The next offload attempt of a ledger whose attempt failed (``offload_failed``;
        ``ManagedLedgerImpl#prepareLedgerInfoForOffloaded``): a fresh uuid (and its objects) stored for the
        ledger, ``complete`` once uploaded. Returns the request the broker sends for the replaced attempt's
        objects ("Previous failed offload"), which stay in S3. Pulsar never replaces a complete offload."""
        name = _topic(topic)
        path = self._ml_path(name)
        data, stat = self.zk.get(path)
        info = parse_managed_ledger_info(data or b"")
        [stored] = [li for li in info.ledgerInfo if li.ledgerId == ledger_id]
        if not stored.HasField("offloadContext") or stored.offloadContext.complete:
            raise ValueError(f"ledger {ledger_id} has no failed offload attempt to replace")
        replaced = ledger_info_to_request_context(stored)
        new = self._offload(
            managed_ledger_name(name),
            ledger_id,
            classic=True,
            segment_count=0,
            entries=stored.entries,
            bookkeeper_deleted=False,
            timestamp=_now_ms(),
        )
        new.complete = complete
        stored.offloadContext.CopyFrom(new)
        self.zk.set(path, serialize_managed_ledger_info(info), version=stat.version)
        return PendingDeleteLedgerInfo(
            topic_name=name,
            ledger_component=LedgerComponent.MANAGED_LEDGER,
            ledger_type=LedgerType.OFFLOAD_LEDGER,
            ledger_id=ledger_id,
            context=replaced,
        )

    def create_partitioned_topic(self, base: str, partitions: int, *, grow_only: bool = False) -> None:
        """Write ``/admin/partitioned-topics/<tenant>/<ns>/persistent/<local>`` = ``{"partitions": N}``.

        With ``grow_only`` an existing entry is only ever raised to ``partitions``, never lowered.
        """
        *namespace, local = _topic(base).split("/")
        path = f"{self.metadata_root}/admin/partitioned-topics/{'/'.join(namespace)}/persistent/{local}"
        if grow_only:
            try:
                data, _ = self.zk.get(path)
                partitions = max(partitions, int(json.loads(data or b"{}").get("partitions", 0)))
            except NoNodeError:
                pass
        self._put(path, json.dumps({"partitions": partitions}).encode())

    def add_cursor(
        self,
        topic: str,
        cursor_name: str,
        cursor_ledger_id: int | None = None,
        *,
        mark_delete: tuple[int, int] | None = None,
        properties: Mapping[str, int] | None = None,
        metadata_version: int = 3,
    ) -> None:
        """Add (or replace) a durable cursor: its ``ManagedCursorInfo`` and, given one, its ledger's znode.

        ``cursor_ledger_id=None`` stores the position inline (``cursorsLedgerId=-1``). The mark-delete
        position defaults to the last entry of the topic's first ledger.
        """
        name = _topic(topic)
        ml_name = managed_ledger_name(name)
        info = self._read_ml(name)
        if mark_delete is None:
            first = info.ledgerInfo[0] if info.ledgerInfo else None
            mark_delete = (first.ledgerId, first.entries - 1) if first else (-1, -1)
        cursor = ml_pb.ManagedCursorInfo(
            cursorsLedgerId=-1 if cursor_ledger_id is None else cursor_ledger_id,
            markDeleteLedgerId=mark_delete[0],
            markDeleteEntryId=mark_delete[1],
            lastActive=_now_ms(),
        )
        for key, value in (properties or {}).items():
            cursor.properties.add(name=key, value=value)
        if cursor_ledger_id is not None:
            self._put(
                ledger_path(cursor_ledger_id, self.ledgers_root),
                build_pulsar_ledger_metadata(
                    cursor_custom_metadata(ml_name, cursor_name),
                    format_version=metadata_version,
                    state="OPEN",  # a cursor ledger is written to while the cursor is open
                    ctime=_now_ms() - LEDGER_LIFETIME_MS,
                ),
            )
        self._put(f"{self._ml_path(name)}/{cursor_name}", serialize_managed_cursor_info(cursor))

    def add_schema(self, schema_id: str, ledger_ids: Iterable[int], *, metadata_version: int = 3) -> None:
        """Write ``/schemas/<schema_id>`` (one version per ledger, the last is the latest) and the ledgers."""
        ids = list(ledger_ids)
        if not ids:
            raise ValueError("a schema has at least one version, so at least one ledger")
        locator = schema_pb.SchemaLocator()
        for version, ledger_id in enumerate(ids):
            entry = locator.index.add(
                version=version,
                position=schema_pb.PositionInfo(ledgerId=ledger_id, entryId=0),
                hash=hashlib.sha256(f"{schema_id}:{version}".encode()).digest(),
            )
            self._put(
                ledger_path(ledger_id, self.ledgers_root),
                build_pulsar_ledger_metadata(
                    schema_custom_metadata(schema_id),
                    format_version=metadata_version,
                    length=256,
                    last_entry_id=0,  # BookkeeperSchemaStorage writes one SchemaEntry per ledger
                    ctime=_now_ms() - LEDGER_LIFETIME_MS,
                ),
            )
        locator.info.CopyFrom(entry)
        self._put(f"{self.metadata_root}/schemas/{schema_id}", serialize_schema_locator(locator))

    def add_compacted_ledger(self, topic: str, ledger_id: int, *, metadata_version: int = 3) -> None:
        """Point the ``__compaction`` cursor at ``ledger_id`` (``CompactedTopicLedger``); write the ledger."""
        name = _topic(topic)
        info = self._read_ml(name)
        last = info.ledgerInfo[-1] if info.ledgerInfo else None
        compacted_to = (last.ledgerId, last.entries - 1) if last else (-1, -1)
        md = parse_ledger_metadata(
            build_pulsar_ledger_metadata(
                {
                    CUSTOM_APPLICATION: "pulsar",
                    CUSTOM_COMPONENT: "compacted-ledger",
                    CUSTOM_COMPACTED_TOPIC: f"persistent://{name}",
                },
                format_version=metadata_version,
                length=4096,
                last_entry_id=9,
                ctime=_now_ms() - LEDGER_LIFETIME_MS,
            )
        )
        # compactedTo holds binary MessageIdData, which the str-valued builder cannot express.
        md.custom_metadata[CUSTOM_COMPACTED_TO] = _message_id_data(*compacted_to)
        self._put(ledger_path(ledger_id, self.ledgers_root), serialize_ledger_metadata(md, metadata_version))
        self.add_cursor(
            name,
            COMPACTION_CURSOR,
            mark_delete=compacted_to,
            properties={COMPACTED_TOPIC_LEDGER_PROPERTY: ledger_id},
            metadata_version=metadata_version,
        )

    def add_foreign_ledger(
        self,
        ledger_id: int,
        application: str | None = "distributedlog",
        *,
        custom: Mapping[str, str] | None = None,
        metadata_version: int = 3,
    ) -> None:
        """A ledger some other BookKeeper user wrote into the same ``/ledgers`` (never Pulsar's to delete).

        ``application=None`` and no ``custom`` write a ledger without any custom metadata.
        """
        tags = dict(custom or {})
        if application is not None:
            tags.setdefault(CUSTOM_APPLICATION, application)
        self._put(
            ledger_path(ledger_id, self.ledgers_root),
            build_pulsar_ledger_metadata(
                tags,
                format_version=metadata_version,
                length=512,
                last_entry_id=3,
                ctime=_now_ms() - LEDGER_LIFETIME_MS,
            ),
        )

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's metadata (managed ledger and cursors) but leave its ledgers and objects.

        That is how orphans are born when a broker's topic deletion stops half-way.
        """
        path = self._ml_path(_topic(topic))
        if self.zk.exists(path):
            self.zk.delete(path, recursive=True)

    # --- the mark phase (PIP-186) ---------------------------------------------------------------------------

    def requests_for_trim(self, topic: str, ledger_ids: Iterable[int]) -> list[PendingDeleteLedgerInfo]:
        """The requests a PIP-186 broker publishes when trimming ``ledger_ids`` off the topic.

        As ``ManagedLedgerImpl`` deletes on trim: a LEDGER request unless the BK copy is already deleted
        (``bookkeeperDeleted``), and an OFFLOAD_LEDGER request when the ledger was offloaded (context with a
        uuid or segments). ``context`` is the ledger's stored LedgerInfo.
        """
        name = _topic(topic)
        stored = {li.ledgerId: li for li in self._read_ml(name).ledgerInfo}
        requests: list[PendingDeleteLedgerInfo] = []
        for ledger_id in ledger_ids:
            if ledger_id not in stored:
                raise KeyError(f"ledger {ledger_id} is not in the metadata of {name}")
            context = ledger_info_to_request_context(stored[ledger_id])
            offload = context.offload_context
            for ledger_type, wanted in (
                (LedgerType.LEDGER, offload is None or not offload.bookkeeper_deleted),
                (
                    LedgerType.OFFLOAD_LEDGER,
                    offload is not None and (offload.has_uid or bool(offload.offload_segment)),
                ),
            ):
                if wanted:
                    requests.append(
                        PendingDeleteLedgerInfo(
                            topic_name=name,
                            ledger_component=LedgerComponent.MANAGED_LEDGER,
                            ledger_type=ledger_type,
                            ledger_id=ledger_id,
                            context=context,
                        )
                    )
        return requests

    def remove_ledgers_from_metadata(self, topic: str, ledger_ids: Iterable[int]) -> None:
        """The mark phase's metadata update: drop the ledgers from ``ManagedLedgerInfo`` (versioned set)."""
        name = _topic(topic)
        path = self._ml_path(name)
        drop = set(ledger_ids)
        data, stat = self.zk.get(path)
        info = parse_managed_ledger_info(data or b"")
        kept = [li for li in info.ledgerInfo if li.ledgerId not in drop]
        del info.ledgerInfo[:]
        info.ledgerInfo.extend(kept)
        self.zk.set(path, serialize_managed_ledger_info(info), version=stat.version)

    def trim(
        self,
        topic: str,
        ledger_ids: Iterable[int],
        publish: Callable[[PendingDeleteLedgerInfo], None],
    ) -> list[PendingDeleteLedgerInfo]:
        """PIP-186's mark phase: publish a request per ledger (and place), then remove them from metadata.

        Nothing is deleted from storage: that is the deletion service's job.
        """
        ids = list(ledger_ids)
        requests = self.requests_for_trim(topic, ids)
        for request in requests:
            publish(request)
        self.remove_ledgers_from_metadata(topic, ids)
        return requests

    def roll_over(self, topic: str, *, stored: bool = False) -> int:
        """A rollover under way: the new ledger is created in BookKeeper (OPEN, created now) and, with
        ``stored``, appended to the topic's ledger list in the store (``updateLedgersListAfterRollover``),
        which Pulsar does after creating it; without, nothing lists it yet. Returns its id."""
        name = _topic(topic)
        [ledger_id] = self.new_ledger_ids()
        self._put(
            ledger_path(ledger_id, self.ledgers_root),
            build_pulsar_ledger_metadata(
                managed_ledger_custom_metadata(managed_ledger_name(name)),
                state="OPEN",
                ctime=_now_ms(),
            ),
        )
        if stored:
            path = self._ml_path(name)
            data, stat = self.zk.get(path)
            info = parse_managed_ledger_info(data or b"")
            info.ledgerInfo.add(ledgerId=ledger_id, timestamp=_now_ms())
            self.zk.set(path, serialize_managed_ledger_info(info), version=stat.version)
        return ledger_id

    # --- inspection ----------------------------------------------------------------------------------------

    def ledger_exists(self, ledger_id: int) -> bool:
        return self.zk.exists(ledger_path(ledger_id, self.ledgers_root)) is not None

    def object_exists(self, key: str, bucket: str | None = None) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=bucket or self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def offload_keys(
        self, topic_or_ctx: str | LedgerInfo | OffloadContext, ledger_id: int
    ) -> list[tuple[str, str]]:
        """Every (bucket, key) of an offloaded ledger: from the topic's metadata, a context, or what this
        instance wrote (which still works after the metadata is gone)."""
        ctx: OffloadContext | None
        if isinstance(topic_or_ctx, OffloadContext):
            ctx = topic_or_ctx
        elif isinstance(topic_or_ctx, LedgerInfo):
            ctx = topic_or_ctx.offload_context
        else:
            ctx = None
            try:
                stored = {li.ledgerId: li for li in self._read_ml(_topic(topic_or_ctx)).ledgerInfo}
                if ledger_id in stored:
                    ctx = ledger_info_to_request_context(stored[ledger_id]).offload_context
            except NoNodeError:
                pass
            ctx = ctx or self._offloads.get(ledger_id)
        return offload_keys_for_context(ctx, ledger_id, self.bucket) if ctx else []

    def cursor_info(self, topic: str, cursor_name: str) -> ml_pb.ManagedCursorInfo | None:
        try:
            data, _ = self.zk.get(f"{self._ml_path(_topic(topic))}/{cursor_name}")
        except NoNodeError:
            return None
        return parse_managed_cursor_info(data or b"")

    def managed_ledger_info(self, topic: str) -> ml_pb.ManagedLedgerInfo | None:
        try:
            return self._read_ml(_topic(topic))
        except NoNodeError:
            return None

    def cleanup(self) -> None:
        """Delete every znode (recursively) and object this instance wrote, and nothing else.

        Intermediate znodes (``/ledgers/00/0000``, ``/managed-ledgers/<tenant>``) stay: other writers may be
        creating children under them at the same moment.
        """
        for path in sorted(self._znodes, key=len, reverse=True):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(path, recursive=True)
        for bucket, key in self._objects:
            self.s3.delete_object(Bucket=bucket, Key=key)
        self._znodes.clear()
        self._objects.clear()

    # --- helpers -------------------------------------------------------------------------------------------

    def _ml_path(self, name: str) -> str:
        return f"{self.metadata_root}/managed-ledgers/{managed_ledger_name(name)}"

    def _read_ml(self, name: str) -> ml_pb.ManagedLedgerInfo:
        """The topic's ManagedLedgerInfo; NoNodeError when the topic does not exist."""
        data, _ = self.zk.get(self._ml_path(name))
        return parse_managed_ledger_info(data or b"")

    def _put(self, path: str, data: bytes) -> None:
        """Create the znode (parents empty, as BookKeeper and the metadata store do) or overwrite it."""
        self._znodes.add(path)
        try:
            self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            self.zk.set(path, data)
