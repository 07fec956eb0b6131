"""Activities of the suspect workflow: is the suspect still there, and still unreferenced? Then publish it.

Reads only (BookKeeper's ledger znode, Pulsar's metadata records, HEAD of offloaded objects) and one publish
to the deletion topic: the watcher deletes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.adapters.zookeeper import LedgerReader, PulsarMetadataStore
from ledger_deletion.errors import ConfigurationError, MetadataFormatError
from ledger_deletion.formats.managed_ledger import (
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
)
from ledger_deletion.formats.offload_keys import ObjectStoreLocation, offload_keys_for_context, offload_uuid
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.request import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from ledger_deletion.shared_bookkeeper import namespace_of
from ledger_deletion.watch.diff import bk_copy_released
from ledger_deletion.watch_contracts import (
    CheckSuspectInput,
    CheckSuspectResult,
    PublishSuspectInput,
    PublishSuspectResult,
    SuspectStep,
)


class Publisher(Protocol):
    def publish(self, request: PendingDeleteLedgerInfo, properties: dict[str, str] | None = None) -> str: ...


class SuspectActivities:
    def __init__(
        self,
        ledgers: LedgerReader,
        pulsar_metadata: PulsarMetadataStore,
        publisher: Publisher,
        objects: ObjectStore | None,
        default_bucket: str,
        endpoint_aliases: Iterable[str] = (),
        others: Sequence[PulsarMetadataStore] = (),
    ) -> None:
        """``objects`` None: no S3 endpoint configured, offloaded objects cannot be looked at (their
        suspects are published after the delay, and the service looks). ``others``: the metadata stores of
        the other Pulsar clusters sharing this BookKeeper (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH): a listing
        in any keeps the suspect, and one whose namespace none of the stores knows is not requested.

        Raises:
            ConfigurationError: the store's endpoint or an alias is not an http(s) URL.
        """
        self._ledgers = ledgers
        self._pulsar_metadata = pulsar_metadata
        self._others = tuple(others)
        self._publisher = publisher
        self._objects = objects
        self._default_bucket = default_bucket
        self._location: ObjectStoreLocation | None = None
        if objects is not None:
            try:
                self._location = ObjectStoreLocation(
                    objects.endpoint_url, objects.region, tuple(endpoint_aliases)
                )
            except ValueError as exc:
                raise ConfigurationError(f"S3 endpoint: {exc}") from None

    @activity.defn(name=SuspectStep.CHECK.value)
    @translate_errors
    def check_suspect(self, inp: CheckSuspectInput) -> CheckSuspectResult:
        request = inp.request
        if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
            exists, detail = self._objects_exist(request)
        else:
            exists = self._ledgers.read(request.ledger_id) is not None
            if not exists:
                self._ledgers.confirm_formatted()  # "no znode" means nothing under a root that is not BK's
            detail = "BookKeeper ledger exists" if exists else "no BookKeeper ledger"
        if not exists:
            return CheckSuspectResult(exists=False, detail=detail)
        return CheckSuspectResult(exists=True, referenced_as=self._kept_by(request), detail=detail)

    def _kept_by(self, request: PendingDeleteLedgerInfo) -> str:
        """What keeps the suspect from being requested ("" when nothing does): a listing in our store or
        any other cluster's, or a namespace none of them knows (it may be a cluster nobody declared; the
        tags Pulsar writes, LedgerMetadataUtils.buildBaseManagedLedgerMetadata, name no cluster)."""
        listed = self._listing(request, self._pulsar_metadata)
        if listed or not self._others:
            return listed
        for store in self._others:
            listed = self._listing(request, store)
            if listed:
                return f"{listed} in the metadata store {store.hosts} of another cluster"
        name = request.schema_id if request.ledger_component is LedgerComponent.SCHEMA_STORAGE else None
        namespace = namespace_of(name or request.managed_ledger_name)
        stores = (self._pulsar_metadata, *self._others)
        if namespace is None or not any(store.knows_namespace(namespace) for store in stores):
            return (
                f"namespace {namespace or name} is known to none of the {len(stores)} Pulsar metadata stores "
                "sharing this BookKeeper: not requested"
            )
        return ""

    @activity.defn(name=SuspectStep.PUBLISH.value)
    @translate_errors
    def publish_suspect(self, inp: PublishSuspectInput) -> PublishSuspectResult:
        return PublishSuspectResult(self._publisher.publish(inp.request))

    def _objects_exist(self, request: PendingDeleteLedgerInfo) -> tuple[bool, str]:
        offload = _offload(request)
        if self._objects is None or self._location is None:
            return True, "offloaded objects not looked at: no S3 endpoint configured"
        refusal = self._location.refusal(offload.driver_metadata)
        if refusal:
            # A HEAD here would answer 404 whether or not the objects exist in that other store.
            return True, f"offloaded objects not looked at: {refusal}"
        keys = offload_keys_for_context(offload, request.ledger_id, self._default_bucket)
        present = [f"s3://{b}/{k}" for b, k in keys if self._objects.head(b, k) is not None]
        if present:
            return True, f"{len(present)} of {len(keys)} offloaded object(s) exist, e.g. {present[0]}"
        for bucket in dict.fromkeys(b for b, _ in keys):
            self._objects.require_bucket(bucket)  # a bare 404 from a missing bucket is no "gone"
        return False, "no offloaded object left"

    def _listing(self, request: PendingDeleteLedgerInfo, store: PulsarMetadataStore) -> str:
        """What in one Pulsar metadata store lists the suspect now ("" when nothing does).

        A record that does not decode may list it: it counts as a listing, so nothing is requested on a guess.
        """
        name = request.managed_ledger_name
        try:
            if request.ledger_component is LedgerComponent.SCHEMA_STORAGE:
                assert request.schema_id is not None  # validated with the request
                locator = store.read_schema_locator(request.schema_id)
                listed = locator is not None and request.ledger_id in schema_ledger_ids(
                    parse_schema_locator(locator)
                )
                return f"schema {request.schema_id}" if listed else ""
            if request.ledger_component is LedgerComponent.MANAGED_CURSOR:
                assert request.cursor_name is not None  # validated with the request
                data = store.read_managed_cursor(name, request.cursor_name)
                if data is None:
                    store.confirm_managed_ledgers_root()  # "no cursor" in the wrong store
                listed = (
                    bool(data) and parse_managed_cursor_info(data or b"").cursorsLedgerId == request.ledger_id
                )
                return f"cursor {request.cursor_name} of {name}" if listed else ""
            data = store.read_managed_ledger(name)
            if data is None:
                # No record proves nothing in a store without /managed-ledgers (a wrong chroot): raises
                # PulsarMetadataNotFound, retried, rather than requesting what another store may list.
                store.confirm_managed_ledgers_root()
                return ""
            for info in parse_managed_ledger_info(data).ledgerInfo:
                if info.ledgerId != request.ledger_id:
                    continue
                if request.ledger_type is LedgerType.LEDGER and not bk_copy_released(info):
                    return f"ledger list of {name}"
                offloaded = request.ledger_type is LedgerType.OFFLOAD_LEDGER and info.HasField(
                    "offloadContext"
                )
                if offloaded and _uuids(_offload(request)) & _stored_uuids(info.offloadContext):
                    return f"offload context of ledger {request.ledger_id} in {name}"
            return ""
        except MetadataFormatError as exc:
            return f"an unreadable record ({exc})"


def _offload(request: PendingDeleteLedgerInfo) -> OffloadContext:
    offload = request.context.offload_context if request.context is not None else None
    assert offload is not None  # an OFFLOAD_LEDGER request is validated to carry one
    return offload


def _uuids(ctx: OffloadContext) -> set[str]:
    ids = {offload_uuid(s.uid_msb, s.uid_lsb) for s in ctx.offload_segment}
    if ctx.has_uid:
        ids.add(offload_uuid(ctx.uid_msb, ctx.uid_lsb))
    return ids


def _stored_uuids(ctx: ml_pb.OffloadContext) -> set[str]:
    """The uuids a stored OffloadContext names."""
    ids = {offload_uuid(s.uidMsb, s.uidLsb) for s in ctx.offloadSegment}
    if ctx.uidMsb or ctx.uidLsb:
        ids.add(offload_uuid(ctx.uidMsb, ctx.uidLsb))
    return ids
