"""Activities on BookKeeper ledger metadata in ZooKeeper, in two classes that hold different rights.

``BookKeeperReadActivities`` only read: verify that a ledger is what the request says, and read Pulsar's
metadata store (whether a data or cursor ledger is still listed by its managed ledger or cursor, a schema
ledger's schema locator, an offloaded ledger's offload uuid). The workflow pool runs them as local
activities, with a :class:`LedgerReader`, which has no delete. ``BookKeeperDeleteActivities``
compare-and-delete a ledger's znode; only the bookkeeper pool holds one, with a :class:`LedgerStore`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.zookeeper import LedgerReader, LedgerStore, PulsarMetadataStore
from ledger_deletion.contracts import (
    DeleteBkLedgerInput,
    DeleteBkLedgerResult,
    DeleteBkLedgerStatus,
    OffloadListedInput,
    OffloadListedResult,
    OffloadSupersededInput,
    OffloadSupersededResult,
    Verdict,
    VerifyBkMetadataInput,
    VerifyBkMetadataResult,
)
from ledger_deletion.errors import MetadataFormatError, PulsarMetadataNotFound
from ledger_deletion.formats.bk_metadata import LedgerMetadata, parse_ledger_metadata
from ledger_deletion.formats.managed_ledger import (
    ledger_list_digest,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
)
from ledger_deletion.formats.offload_keys import offload_uuid
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.shared_bookkeeper import namespace_of
from ledger_deletion.tripwire import Evidence, View, is_evidence, refuses

# Keys Pulsar writes into BK custom metadata (managed-ledger LedgerMetadataUtils).
APPLICATION = "application"
COMPONENT = "component"
MANAGED_LEDGER = "pulsar/managed-ledger"
CURSOR = "pulsar/cursor"
SCHEMA_ID = "pulsar/schemaId"

log = logging.getLogger(__name__)
_M = TypeVar("_M")


class BookKeeperReadActivities:
    """The read-only checks on BookKeeper's and Pulsar's metadata: safe to repeat, they change nothing.

    ``other_stores``: the metadata stores of the other Pulsar clusters that share this BookKeeper
    (``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH``). Every "is it listed" read asks each of them as well as ours,
    and a listing in any keeps the ledger; a ledger whose tagged namespace none of them has is never deleted
    (``Verdict.UNKNOWN_NAMESPACE``). Comparisons against the owner broker's list stay on ours. ``tripwire``:
    with ``none`` (no other store), the view that stops unknown namespaces' deletes once a recent ledger of
    one proves another writer (``ledger_deletion.tripwire``). Neither given (tests, the benchmark): no
    namespace check.
    """

    def __init__(
        self,
        ledgers: LedgerReader,
        pulsar_metadata: PulsarMetadataStore,
        other_stores: Sequence[PulsarMetadataStore] = (),
        tripwire: View | None = None,
    ) -> None:
        self._ledgers = ledgers
        self._pulsar_metadata = pulsar_metadata
        self._others = tuple(other_stores)
        self._stores = (pulsar_metadata, *self._others)
        self._tripwire = tripwire

    @activity.defn(name="verify_bk_metadata")
    @translate_errors
    def verify_bk_metadata(self, inp: VerifyBkMetadataInput) -> VerifyBkMetadataResult:
        znode = self._ledgers.read(inp.request.ledger_id)
        if znode is None:
            self._ledgers.confirm_formatted()  # "not found" under a root not BookKeeper's means nothing
            return VerifyBkMetadataResult(Verdict.NOT_FOUND, reason="no ledger znode")
        try:
            metadata = parse_ledger_metadata(znode.data)
        except MetadataFormatError as exc:
            # Unreadable metadata proves nothing about ownership: never delete it.
            return VerifyBkMetadataResult(
                Verdict.MISMATCH, znode.version, f"unreadable ledger metadata: {exc}"
            )
        verdict, reason = judge(metadata, inp.request)
        # BookKeeper writes ctime into the metadata only with storeSystemTimeAsLedgerCreationTime; readers
        # then take the znode's ctime (LedgerMetadataSerDe.parseConfig(..., stat.getCtime())), as here.
        created_ms = metadata.ctime if metadata.ctime is not None else znode.ctime_ms
        unknown_namespace = ""
        if verdict is Verdict.MATCH:
            kept, unknown_namespace = self._unknown_namespace(inp.request, created_ms)
            if kept:
                verdict, reason = Verdict.UNKNOWN_NAMESPACE, kept
        if verdict is not Verdict.MATCH:
            return VerifyBkMetadataResult(
                verdict,
                znode.version,
                reason,
                metadata_format_version=metadata.format_version,
                length=metadata.length,
                tags=_tags(metadata),
            )
        schema_referenced = bk_copy_released = False
        newest = -1
        if inp.request.ledger_component is LedgerComponent.SCHEMA_STORAGE:
            assert inp.request.schema_id is not None  # judge matched it against the ledger's tag
            schema_referenced, why, newest = self._schema_references(
                inp.request.schema_id, inp.request.ledger_id
            )
            reason = why or reason
        if inp.check_bk_copy_released:
            bk_copy_released, reason = self._bk_copy_released(inp.request, inp.owner_listed_digest)
        store_listing, listed_newest = self._store_listing(inp.request)
        return VerifyBkMetadataResult(
            verdict,
            znode.version,
            reason,
            metadata_format_version=metadata.format_version,
            length=metadata.length,
            schema_referenced=schema_referenced,
            bk_copy_released=bk_copy_released,
            metadata_store_listing=store_listing,
            state=metadata.state,
            age_seconds=max(0.0, time.time() - created_ms / 1000),
            newest_listed=max(newest, listed_newest),
            unknown_namespace=unknown_namespace,
            tags=_tags(metadata),
        )

    def _store_listing(self, request: PendingDeleteLedgerInfo) -> tuple[str, int]:
        """What in a Pulsar metadata store (ours or another cluster's sharing this BookKeeper) still lists
        this data or cursor ledger ("" when nothing does), and the bound of "newer than listed" (-1: none).

        Any listing in any store counts, with no comparison against the owner broker's list: this can only
        keep a ledger. A data ledger listed only as an offloaded copy whose BookKeeper copy the broker
        released is not listed. Unreadable metadata may list it: never deleted on a guess. A schema ledger's
        listing is its locator (``schema_referenced``).
        """
        listings: list[str] = []
        newest: list[int] = []
        for store in self._stores:
            listing, store_newest = self._listing_in(store, request)
            listings.append(listing)
            newest.append(store_newest)
        return next((listing for listing in listings if listing), ""), _bound(newest)

    def _listing_in(self, store: PulsarMetadataStore, request: PendingDeleteLedgerInfo) -> tuple[str, int]:
        """:meth:`_store_listing` in one store: what lists the ledger there, and the newest id it lists."""
        name = request.managed_ledger_name
        where_stored = self._store_name(store)
        if request.ledger_component is LedgerComponent.MANAGED_CURSOR:
            assert request.cursor_name is not None  # required for a cursor request when it was decoded
            where = f"cursor {request.cursor_name} of {name}"
            data = store.read_managed_cursor(name, request.cursor_name)
            cursor, unreadable = self._stored(store, data, parse_managed_cursor_info, where)
            if cursor is None:
                return unreadable, -1
            if cursor.cursorsLedgerId < 0:
                return self._inline_cursor_bound(store, name, where)
            if cursor.cursorsLedgerId != request.ledger_id:
                return unreadable, cursor.cursorsLedgerId
            return (f"{where} stores it as its cursor ledger in {where_stored}", cursor.cursorsLedgerId)
        if request.ledger_component is not LedgerComponent.MANAGED_LEDGER:
            return "", -1
        data = store.read_managed_ledger(name)
        info, unreadable = self._stored(store, data, parse_managed_ledger_info, f"managed ledger {name}")
        if info is None:
            return unreadable, -1
        newest = max((e.ledgerId for e in info.ledgerInfo), default=-1)
        entries = [e for e in info.ledgerInfo if e.ledgerId == request.ledger_id]
        if entries and not all(_released(e) for e in entries):
            return f"{name} lists it in {where_stored}", newest
        return "", newest

    def _inline_cursor_bound(self, store: PulsarMetadataStore, name: str, where: str) -> tuple[str, int]:
        """The newer-than-listed bound of a cursor whose position is stored inline (``cursorsLedgerId`` -1):
        its managed ledger's newest data ledger.

        Such a cursor may be creating its ledger right now: ``ManagedCursorImpl.createNewMetadataLedger``
        creates it (``asyncCreateLedger``), writes the position into it, and only then does
        ``switchToNewLedger`` store its id in the cursor's record; until then the store says -1 and nothing
        lists the new ledger. Ids only grow, so a ledger being created is newer than every data ledger the
        managed ledger lists, and is kept as unsettled. An older cursor ledger is an orphan: the cursor went
        inline when it was closed (``persistPositionWhenClosing``, whose ``asyncDeleteCursorLedger`` may have
        failed) or its ledger's switch failed, and a topic load creates a newer data ledger
        (``ManagedLedgerImpl.initialize``). A data rollover landing between the cursor ledger's creation and
        its switch (seconds) is covered by the minimum age, after which the switch has landed or failed.
        """
        data = store.read_managed_ledger(name)
        info, unreadable = self._stored(store, data, parse_managed_ledger_info, f"managed ledger {name}")
        if info is None:
            # An unreadable managed ledger may list anything; none at all leaves a cursor that cannot be.
            return (f"{where}: {unreadable}" if unreadable else ""), -1
        return "", max((e.ledgerId for e in info.ledgerInfo), default=-1)

    def _store_name(self, store: PulsarMetadataStore) -> str:
        if store is self._pulsar_metadata:
            return "Pulsar's metadata store"
        return f"the metadata store {store.hosts} of another Pulsar cluster sharing this BookKeeper"

    def _unknown_namespace(self, request: PendingDeleteLedgerInfo, created_ms: int | None) -> tuple[str, str]:
        """Why the ledger's tagged namespace (``judge`` matched the request's names to its tags) makes it
        another cluster's, or "" when it does not; and the namespace when no store has it (the delete asks
        the tripwire again, ``BookKeeperDeleteActivities``).

        Known to any store: "". With other stores declared, known to none: another cluster's, perhaps one
        nobody declared. With ``none``: a recent ledger is evidence of another writer and trips the tripwire
        (``ledger_deletion.tripwire``, which says why recent); an old one is kept only while it is tripped
        (a namespace deleted half-way leaves old orphans, which may go). ``created_ms`` None (offloaded
        objects, whose BookKeeper ledger may be long gone): never evidence, kept while tripped.
        """
        if not self._others and self._tripwire is None:
            return "", ""
        component = request.ledger_component
        name = (
            request.schema_id if component is LedgerComponent.SCHEMA_STORAGE else request.managed_ledger_name
        )
        namespace = namespace_of(name or "")
        if namespace is not None and any(store.knows_namespace(namespace) for store in self._stores):
            return "", ""
        shown = namespace or repr(name)
        if self._others:
            return (
                f"namespace {shown} is known to none of the {len(self._stores)} Pulsar metadata stores "
                "sharing this BookKeeper (this cluster's and LEDGER_DELETION_BOOKKEEPER_SHARED_WITH's): the "
                "ledger may be a cluster's nobody declared"
            ), shown
        assert self._tripwire is not None
        if created_ms is not None and is_evidence(created_ms, time.time()):
            state = self._tripwire.report(Evidence(shown, request.ledger_id, created_ms, "the workflow pool"))
            return (
                f"namespace {shown} is not this cluster's, and the ledger was created "
                f"{max(0.0, time.time() - created_ms / 1000):.0f} s ago: another writer shares this "
                "BookKeeper, though LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none; "
                f"tripwire {state.describe()}"
            ), shown
        state = self._tripwire.current()
        if state.tripped:
            why = f"namespace {shown} is not this cluster's and the shared-BookKeeper tripwire is "
            return why + state.describe(), shown
        return "", shown

    def _stored(
        self, store: PulsarMetadataStore, data: bytes | None, parse: Callable[[bytes], _M], what: str
    ) -> tuple[_M | None, str]:
        """A record read from a Pulsar metadata store, parsed; or None, and why when it is unreadable
        ("" when there is none, in a store that is Pulsar's)."""
        if data is None:
            store.confirm_managed_ledgers_root()
            return None, ""
        try:
            return parse(data), ""
        except MetadataFormatError as exc:
            return None, f"{what} unreadable in Pulsar's metadata store: {exc}"

    def _bk_copy_released(self, request: PendingDeleteLedgerInfo, owner_digest: str) -> tuple[bool, str]:
        """Does the ledger's managed ledger say its BookKeeper copy is released (offload complete and
        ``bookkeeperDeleted``)? Anything else, unreadable included, keeps the copy."""
        if request.ledger_component is not LedgerComponent.MANAGED_LEDGER:
            return False, "only a data ledger has an offloaded copy"
        entries, why_not = self._owner_entries(request, owner_digest)
        name = request.managed_ledger_name
        if entries and all(_released(e) for e in entries):
            return True, f"{name} reads it from tiered storage and released its BookKeeper copy"
        return False, why_not or f"{name} has not released its BookKeeper copy"

    @activity.defn(name="check_offload_superseded")
    @translate_errors
    def check_offload_superseded(self, inp: OffloadSupersededInput) -> OffloadSupersededResult:
        """Has a later offload attempt replaced the one whose objects the request names?

        Each attempt writes a fresh uuid into the ledger's OffloadContext before it uploads, and the broker
        reads offloaded entries under the uuid stored there only; it sends the objects of the attempt it
        replaced (a failed one, never a complete one) to be deleted while it still lists the ledger. A uuid,
        once replaced, never comes back. Only another classic uuid stored in every entry of the ledger, with
        the requested uuid none of their segments, frees the objects; a request saying its offload was
        complete, no entry, an entry without a uuid, unreadable metadata or a ledger list other than the
        owner's keep them.
        """
        request = inp.request
        offload = request.context.offload_context if request.context else None
        if request.ledger_type is not LedgerType.OFFLOAD_LEDGER or offload is None or not offload.has_uid:
            return OffloadSupersededResult(False, "only a classic offload's uuid can be compared")
        requested = offload_uuid(offload.uid_msb, offload.uid_lsb)
        if offload.complete:
            return OffloadSupersededResult(
                False, f"offload {requested} was complete: Pulsar never replaces it"
            )
        entries, why_not = self._owner_entries(request, inp.owner_listed_digest)
        if not entries:
            return OffloadSupersededResult(False, why_not)
        name = request.managed_ledger_name
        stored: set[str] = set()
        for entry in entries:
            context = entry.offloadContext
            if not entry.HasField("offloadContext") or not (context.uidMsb or context.uidLsb):
                return OffloadSupersededResult(False, f"{name} stores no offload uuid for it to compare")
            stored.add(offload_uuid(context.uidMsb, context.uidLsb))
            stored.update(offload_uuid(seg.uidMsb, seg.uidLsb) for seg in context.offloadSegment)
        if requested in stored:
            return OffloadSupersededResult(False, f"{name} stores offload {requested} for it")
        return OffloadSupersededResult(
            True, f"{name} stores offload {', '.join(sorted(stored))} for it, which replaced {requested}"
        )

    @activity.defn(name="check_offload_listed")
    @translate_errors
    def check_offload_listed(self, inp: OffloadListedInput) -> OffloadListedResult:
        """Does Pulsar's metadata store still reference the request's offloaded objects?

        It does while the ledger's ManagedLedgerInfo lists it with the request's uuid (the classic one, or a
        segment's): ManagedLedgerImpl.internalTrimLedgers drops a trimmed ledger from its memory before the
        store write, and a write that fails (anything but BadVersion) is not rolled back, so the owner may no
        longer list a ledger the store still does; the next owner to load the topic reads it back, from
        these objects. Another uuid there means a later attempt replaced this one
        (prepareLedgerInfoForOffloaded writes each attempt's uuid before it uploads): these objects are
        referenced by nothing. Any listing counts, with no comparison against the owner's list: this can only
        keep the objects. Unreadable metadata may reference them: kept.
        """
        request = inp.request
        offload = request.context.offload_context if request.context else None
        if offload is None:
            return OffloadListedResult()
        # Clusters sharing a BookKeeper often share its offload bucket too, and the objects' ManagedLedgerName
        # (what the offload pool compares) names no cluster: the BookKeeper rule applies to them as well.
        kept, unknown = self._unknown_namespace(request, None)
        if kept:
            return OffloadListedResult(namespace_refusal=kept)
        wanted = {offload_uuid(offload.uid_msb, offload.uid_lsb)} if offload.has_uid else set()
        wanted.update(offload_uuid(seg.uid_msb, seg.uid_lsb) for seg in offload.offload_segment)
        name = request.managed_ledger_name
        for store in self._stores:  # listed in any store sharing this BookKeeper keeps them
            data = store.read_managed_ledger(name)
            info, unreadable = self._stored(store, data, parse_managed_ledger_info, f"managed ledger {name}")
            if info is None:
                if unreadable:
                    return OffloadListedResult(unreadable, unknown_namespace=unknown)
                continue
            for entry in info.ledgerInfo:
                if entry.ledgerId != request.ledger_id or not entry.HasField("offloadContext"):
                    continue
                context = entry.offloadContext
                stored = (
                    {offload_uuid(context.uidMsb, context.uidLsb)}
                    if context.uidMsb or context.uidLsb
                    else set()
                )
                stored.update(offload_uuid(seg.uidMsb, seg.uidLsb) for seg in context.offloadSegment)
                if shared := sorted(stored & wanted):
                    return OffloadListedResult(
                        f"{name} lists it in {self._store_name(store)}, offloaded as {', '.join(shared)}",
                        unknown_namespace=unknown,
                    )
        return OffloadListedResult(unknown_namespace=unknown)

    def _owner_entries(
        self, request: PendingDeleteLedgerInfo, owner_digest: str
    ) -> tuple[list[ml_pb.ManagedLedgerInfo.LedgerInfo], str]:
        """The ledger's entries (more than one only in damaged metadata) in its ManagedLedgerInfo, read
        from Pulsar's metadata store, or none and why. The store speaks for the topic only when its ledger
        list is the one its owner broker reported (``owner_digest``; "" matches no list): a wrong store
        (another cluster's copy, a restored snapshot) or a list that changed in between is not trusted, and
        the workflow asks again after its grace timer (after the last one the objects are kept; reconcile
        finds them later)."""
        name = request.managed_ledger_name
        data = self._pulsar_metadata.read_managed_ledger(name)
        if data is None:
            return [], f"no managed ledger {name} in Pulsar's metadata store"
        try:
            info = parse_managed_ledger_info(data)
        except MetadataFormatError as exc:
            return [], f"managed ledger {name} unreadable: {exc}"
        if ledger_list_digest(e.ledgerId for e in info.ledgerInfo) != owner_digest:
            return [], f"Pulsar's metadata store lists other ledgers for {name} than its owner broker"
        entries = [e for e in info.ledgerInfo if e.ledgerId == request.ledger_id]
        return entries, "" if entries else f"{name} does not list it"

    def _schema_references(self, schema_id: str, ledger_id: int) -> tuple[bool, str, int]:
        """Does the schema's locator, in any store sharing this BookKeeper, still list the ledger? (The
        topic may be gone while its schema stays.) Also the bound of "newer than listed" (-1: none)."""
        newest: list[int] = []
        for store in self._stores:
            referenced, why, store_newest = self._schema_references_in(store, schema_id, ledger_id)
            if referenced:
                return True, why, -1
            newest.append(store_newest)
        return False, "", _bound(newest)

    def _schema_references_in(
        self, store: PulsarMetadataStore, schema_id: str, ledger_id: int
    ) -> tuple[bool, str, int]:
        try:
            data = store.read_schema_locator(schema_id)
        except PulsarMetadataNotFound:
            if store is self._pulsar_metadata:
                raise
            # Another cluster that never stored a schema has no /schemas yet (BookkeeperSchemaStorage creates
            # it with the first one): its /managed-ledgers proves the store is Pulsar's, or this raises.
            store.confirm_managed_ledgers_root()
            data = None
        if data is None:
            return False, "", -1
        where = "" if store is self._pulsar_metadata else f" in {self._store_name(store)}"
        try:
            listed = schema_ledger_ids(parse_schema_locator(data))
        except MetadataFormatError as exc:
            # An unreadable locator may still list it: never delete on a guess.
            return True, f"schema locator of {schema_id}{where} unreadable: {exc}", -1
        newest = max(listed, default=-1)
        if ledger_id in listed:
            return True, f"listed by the schema locator of {schema_id}{where}", newest
        return False, "", newest


class BookKeeperDeleteActivities:
    """The one step that changes BookKeeper's metadata: the compare-and-delete of a verified ledger znode.

    ``may_delete`` raises when deletes must not run now: the kill switch is on (``DeletionPaused``) or was not
    read lately (``PauseStateUnknown``); the pools pass their ``kill_switch.Watch.check``. ``tripwire``: the
    shared-BookKeeper tripwire, asked again before a ledger of a namespace this cluster does not have goes.
    """

    def __init__(
        self,
        store: LedgerStore,
        may_delete: Callable[[], None] = lambda: None,
        tripwire: View | None = None,
    ) -> None:
        self._store = store
        self._may_delete = may_delete
        self._tripwire = tripwire

    @activity.defn(name="delete_bk_ledger")
    @translate_errors
    def delete_bk_ledger(self, inp: DeleteBkLedgerInput) -> DeleteBkLedgerResult:
        self._may_delete()  # before anything: a paused delete changes nothing
        if inp.unknown_namespace and refuses(self._tripwire):
            return DeleteBkLedgerResult(DeleteBkLedgerStatus.TRIPPED)
        deleted = self._store.delete(inp.ledger_id, inp.expected_version)
        if deleted is None and activity.info().attempt > 1:
            # An earlier attempt failed while or after sending its delete (connection lost, timed out), and
            # the znode is gone: that delete may have taken effect, or something else removed the ledger
            # (an operator, BookKeeper's own tools, a broker still deleting on its own). ZooKeeper keeps no
            # record of which, so the outcome says it is gone, not that this service deleted it.
            log.info(
                "ledger %d gone when attempt %d ran: deleted by an earlier attempt or by someone else",
                inp.ledger_id,
                activity.info().attempt,
            )
            return DeleteBkLedgerResult(DeleteBkLedgerStatus.GONE_ON_RETRY)
        if deleted is None:
            return DeleteBkLedgerResult(DeleteBkLedgerStatus.ALREADY_DELETED)
        return DeleteBkLedgerResult(
            DeleteBkLedgerStatus.DELETED if deleted else DeleteBkLedgerStatus.VERSION_CHANGED
        )


def _bound(newest: Sequence[int]) -> int:
    """The bound of "newer than listed" across the stores that list something (-1: none does).

    The lowest, not the highest: a ledger tagged with a managed ledger several clusters have (a
    geo-replicated topic) may be any of theirs being created, so it is settled only once it is below what
    each of them lists. The highest would let one cluster's newer list settle another's rollover under way.
    """
    return min((n for n in newest if n >= 0), default=-1)


def _released(entry: ml_pb.ManagedLedgerInfo.LedgerInfo) -> bool:
    context = entry.offloadContext
    return entry.HasField("offloadContext") and context.complete and context.bookkeeperDeleted


def _tags(metadata: LedgerMetadata) -> dict[str, str]:
    """The ledger's custom metadata as text, for the audit log's evidence; bounded, since a ledger written by
    another application may carry anything there (Pulsar writes four short tags)."""
    return {
        key[:128]: value[:256].decode("utf-8", errors="replace")
        for key, value in sorted(metadata.custom_metadata.items())[:16]
    }


def judge(metadata: LedgerMetadata, request: PendingDeleteLedgerInfo) -> tuple[Verdict, str]:
    """Does this ledger's BK metadata prove it is the ledger the request describes?"""
    application = metadata.custom(APPLICATION)
    if application is None:
        return Verdict.MISMATCH, "ledger has no application tag: ownership cannot be proven"
    if application != "pulsar":
        return Verdict.NOT_PULSAR, f"application is {application!r}"
    component = metadata.custom(COMPONENT)
    expected: dict[str, str | None]
    if request.ledger_component is LedgerComponent.SCHEMA_STORAGE:
        expected = {COMPONENT: "schema", SCHEMA_ID: request.schema_id}
    elif request.ledger_component is LedgerComponent.MANAGED_CURSOR:
        expected = {
            COMPONENT: "managed-ledger",
            MANAGED_LEDGER: request.managed_ledger_name,
            CURSOR: request.cursor_name,
        }
    else:
        # A data ledger carries no cursor tag: a cursor ledger claimed as data is a mismatch.
        expected = {COMPONENT: "managed-ledger", MANAGED_LEDGER: request.managed_ledger_name, CURSOR: None}
    for key, want in expected.items():
        if want is None:
            # Absent, not merely unreadable: ``custom`` reads a non-UTF-8 value as None too.
            if key in metadata.custom_metadata:
                return Verdict.MISMATCH, f"{key} is set, request says it is absent"
            continue
        have = component if key == COMPONENT else metadata.custom(key)
        if have != want:
            return Verdict.MISMATCH, f"{key} is {have!r}, request says {want!r}"
    return Verdict.MATCH, ""
