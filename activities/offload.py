"""Activities on an offloaded ledger's objects in tiered storage: delete them and confirm they are gone, or,
in shadow mode, find what that delete would remove (HEAD only)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.contracts import DeleteOffloadInput, DeleteOffloadResult, InspectOffloadResult, Outcome
from ledger_deletion.errors import (
    ConfigurationError,
    DeletionNotConfirmed,
    InvalidRequestError,
    UnsupportedOffloadDriver,
)
from ledger_deletion.formats.offload_keys import (
    MANAGED_LEDGER_NAME_TAG,
    ROLE_TAG,
    ObjectStoreLocation,
    object_role,
    offload_keys_for_context,
)
from ledger_deletion.request import LedgerInfo, OffloadContext
from ledger_deletion.tripwire import View, refuses

# jclouds provider names whose blobs live in an S3-compatible store this service can reach.
S3_DRIVERS = frozenset({"aws-s3", "s3", "S3", "AWS_S3"})


class OffloadActivities:
    def __init__(
        self,
        store: ObjectStore,
        default_bucket: str,
        endpoint_aliases: Iterable[str] = (),
        may_delete: Callable[[], None] = lambda: None,
        tripwire: View | None = None,
    ) -> None:
        """``endpoint_aliases``: other URLs of ``store``'s endpoint that driver metadata may name
        (``LEDGER_DELETION_S3_ENDPOINT_ALIASES``). ``may_delete`` raises when deletes must not run now (the
        kill switch, as ``BookKeeperDeleteActivities`` takes it). ``tripwire``: the shared-BookKeeper
        tripwire, asked again before the objects of a namespace this cluster does not have go.

        Raises:
            ConfigurationError: the store's endpoint or an alias is not an http(s) URL.
        """
        self._store = store
        self._default_bucket = default_bucket
        self._may_delete = may_delete
        self._tripwire = tripwire
        try:
            self._location = ObjectStoreLocation(store.endpoint_url, store.region, tuple(endpoint_aliases))
        except ValueError as exc:
            raise ConfigurationError(f"S3 endpoint: {exc}") from None

    @activity.defn(name="delete_offload_segment")
    @translate_errors
    def delete_offload_segment(self, inp: DeleteOffloadInput) -> DeleteOffloadResult:
        self._may_delete()  # before anything: a paused delete changes nothing
        if inp.unknown_namespace and refuses(self._tripwire):
            return DeleteOffloadResult(
                Outcome.SKIPPED_UNKNOWN_NAMESPACE,
                reason=f"namespace {inp.unknown_namespace} is not this cluster's and the "
                "shared-BookKeeper tripwire tripped before the delete",
            )
        found = self._find(inp)
        if found.refused:
            return DeleteOffloadResult(Outcome.SKIPPED_METADATA_MISMATCH, reason=found.refused)
        if not found.existing:
            return DeleteOffloadResult(Outcome.ALREADY_DELETED, reason="no offloaded objects left")
        # Again, now: the HEADs above take seconds against a slow store, and `ledger-deletion pause` promises
        # that no DeleteObjects starts once it has returned, not only no activity. Once, not per bucket:
        # the data and index objects go or stay together.
        self._may_delete()
        markers: set[tuple[str, str]] = set()
        for bucket, keys in found.existing.items():
            markers.update((bucket, key) for key in self._store.delete(bucket, keys))
        # Confirm: some S3 implementations have been seen to accept DeleteObjects and keep the objects.
        still_there = [
            f"s3://{b}/{k}" for b, keys in found.existing.items() for k in keys if self._store.head(b, k)
        ]
        if still_there:
            raise DeletionNotConfirmed(f"still present after delete: {', '.join(still_there[:4])}")
        return DeleteOffloadResult(
            Outcome.DELETED,
            deleted_keys=found.urls,
            reason=_versions_kept(markers & found.versioned),
            bytes=found.bytes,
            sizes=found.sizes,
            etags=found.etags,
        )

    @activity.defn(name="inspect_offload_segment")
    @translate_errors
    def inspect_offload_segment(self, inp: DeleteOffloadInput) -> InspectOffloadResult:
        """Shadow mode's stand-in for ``delete_offload_segment``: what it would delete now, found by the
        same checks (driver, store, owner tags, bucket) with HEAD alone. Never asks the kill switch: it
        changes nothing."""
        found = self._find(inp)
        if found.refused:
            return InspectOffloadResult(Outcome.SKIPPED_METADATA_MISMATCH, reason=found.refused)
        if not found.existing:
            return InspectOffloadResult(Outcome.ALREADY_DELETED, reason="no offloaded objects left")
        kept = (
            f"; {len(found.versioned)} would keep their bytes as noncurrent versions (versioned bucket)"
            if found.versioned
            else ""
        )
        return InspectOffloadResult(
            Outcome.WOULD_DELETE,
            keys=found.urls,
            bytes=found.bytes,
            sizes=found.sizes,
            etags=found.etags,
            reason=f"would delete {len(found.urls)} object(s), {found.bytes} bytes by HEAD{kept}",
        )

    def _find(self, inp: DeleteOffloadInput) -> _Found:
        """The request's objects as they are now, and whether they may be deleted (``refused`` says why
        not). Raises for a driver or store this service cannot delete from, and for a missing bucket."""
        targets = self._targets(inp.context, inp.ledger_id)
        offload = inp.context.offload_context
        assert offload is not None  # _targets refuses a context without one
        if offload.offload_segment:
            return _Found(refused=_segments_refused(offload))
        found = _Found()
        for bucket, key in targets:
            head = self._store.head(bucket, key)
            if head is None:
                continue
            if head.versioned:
                found.versioned.add((bucket, key))
            problem = _ownership_problem(head.metadata, inp.managed_ledger_name, object_role(key))
            if problem:
                # Nothing is deleted, not even the objects that did match: the pair goes or stays together.
                return _Found(refused=f"s3://{bucket}/{key} {problem}; nothing deleted")
            found.existing[bucket].append(key)
            found.bytes += head.size
            found.sizes[f"s3://{bucket}/{key}"] = head.size
            found.etags[f"s3://{bucket}/{key}"] = head.etag
        # HEAD answers a bare 404 for a missing bucket too: before a bucket's keys count as deleted, make sure
        # the bucket is really there (a wrong bucket or endpoint raises BucketNotFound, and the request is
        # dead-lettered instead of acked with its objects left behind).
        for bucket in dict.fromkeys(b for b, _ in targets):
            if bucket not in found.existing:
                self._store.require_bucket(bucket)
        return found

    def _targets(self, context: LedgerInfo, ledger_id: int) -> list[tuple[str, str]]:
        offload = context.offload_context
        if offload is None:
            raise InvalidRequestError("OFFLOAD_LEDGER request without offloadContext")
        drivers = [offload.driver_metadata] + [s.driver_metadata for s in offload.offload_segment]
        for driver in drivers:
            if driver is not None and driver.name not in S3_DRIVERS:
                raise UnsupportedOffloadDriver(f"offload driver {driver.name!r} is not S3-compatible")
        for driver in drivers:
            # The keys are only looked up in the store our client reaches. For an offload in another store (a
            # namespace's offload policy pointing elsewhere) every HEAD here answers 404, which would ack the
            # request as ALREADY_DELETED and orphan the objects for good. Refused like a non-S3 driver: the
            # error is permanent, so the request is dead-lettered at its first attempt, nothing deleted.
            problem = self._location.refusal(driver)
            if problem:
                raise UnsupportedOffloadDriver(
                    f"{problem}, not the object store this service deletes from, "
                    f"{self._location.describe()}; nothing deleted (if it is the same store, list that URL "
                    "in LEDGER_DELETION_S3_ENDPOINT_ALIASES, or set LEDGER_DELETION_S3_REGION to its region)"
                )
        targets = offload_keys_for_context(offload, ledger_id, self._default_bucket)
        if not targets:
            raise InvalidRequestError("offloadContext yields no object keys")
        return targets


def _versions_kept(kept: set[tuple[str, str]]) -> str:
    """Say so when the delete left the bytes in the bucket: "" when it did not.

    In a versioned bucket DeleteObjects without version ids (what this service sends, and what Pulsar's own
    offloader sends through jclouds' removeBlobs) writes delete markers: readers get 404, but each object's
    last version stays, noncurrent, until the bucket's lifecycle (NoncurrentVersionExpiration) removes it.
    The versions are not deleted here: versioning is the bucket owner's safety net, and deleting versions
    would need s3:DeleteObjectVersion for a permanent delete Pulsar itself never makes.
    """
    if not kept:
        return ""
    buckets = ", ".join(sorted({bucket for bucket, _ in kept}))
    return (
        f"bucket {buckets} is versioned: the delete wrote delete markers and {len(kept)} object(s) keep "
        "their bytes as noncurrent versions until the bucket's lifecycle (NoncurrentVersionExpiration) "
        "expires them"
    )


def _ownership_problem(metadata: Mapping[str, str], managed_ledger_name: str, role: str) -> str:
    """Why the object's user metadata does not prove it is the ``role`` object of ``managed_ledger_name``.

    Empty when it does. A missing tag fails closed, as a missing tag on a BK ledger does: an object without
    ManagedLedgerName cannot be told apart from another topic's (or another application's) object under a
    colliding key. The price: objects offloaded by brokers older than apache/pulsar#14907, which wrote only
    the format and software version, are never deleted by this service and stay as orphans (acked,
    SKIPPED_METADATA_MISMATCH with this reason), to be removed by an operator who has checked them.
    """
    tags = {k.lower(): v for k, v in metadata.items()}
    owner = tags.get(MANAGED_LEDGER_NAME_TAG)
    if owner is None:
        return (
            f"has no ManagedLedgerName metadata, so nothing proves it belongs to {managed_ledger_name!r} "
            "(written by a Pulsar before apache/pulsar#14907, or not by Pulsar)"
        )
    if owner != managed_ledger_name:
        return f"belongs to {owner!r}, request says {managed_ledger_name!r}"
    found = tags.get(ROLE_TAG)
    if found != role:
        return f"has role {found!r} where the {role} object of the offload is expected"
    return ""


@dataclass
class _Found:
    """An offload's objects as HEAD finds them, by bucket; or why none of them may be deleted."""

    existing: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    versioned: set[tuple[str, str]] = field(default_factory=set)  # a delete keeps their bytes
    bytes: int = 0
    refused: str = ""  # SKIPPED_METADATA_MISMATCH's reason
    sizes: dict[str, int] = field(default_factory=dict)  # by s3:// URL, from HEAD
    etags: dict[str, str] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [f"s3://{b}/{k}" for b, keys in self.existing.items() for k in keys]


def _segments_refused(offload: OffloadContext) -> str:
    """Streaming-offload (PIP-76) segments are never deleted for one ledger.

    A segment's object pair (``<uuid>``, ``<uuid>-index``) holds the entries of every ledger written while it
    was open: its V2 index keeps per-ledger metadata, and PIP-76 deletes a segment only once all its ledgers
    are deleted, which one request cannot show. The streaming offloader also writes no ManagedLedgerName or
    role on these objects, so nothing in them could prove the request right either.
    """
    return (
        f"offloadContext lists {len(offload.offload_segment)} streaming-offload segment(s) (PIP-76); a "
        "segment can hold entries of other ledgers, so none of its objects is deleted for one ledger"
    )
