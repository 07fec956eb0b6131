"""Activity that deletes an offloaded ledger's objects from tiered storage and confirms they are gone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.contracts import DeleteOffloadInput, DeleteOffloadResult, Outcome
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

# jclouds provider names whose blobs live in an S3-compatible store this service can reach.
S3_DRIVERS = frozenset({"aws-s3", "s3", "S3", "AWS_S3"})


class OffloadActivities:
    def __init__(self, store: ObjectStore, default_bucket: str, endpoint_aliases: Iterable[str] = ()) -> None:
        """``endpoint_aliases``: other URLs of ``store``'s endpoint that driver metadata may name
        (``LEDGER_DELETION_S3_ENDPOINT_ALIASES``).

        Raises:
            ConfigurationError: the store's endpoint or an alias is not an http(s) URL.
        """
        self._store = store
        self._default_bucket = default_bucket
        try:
            self._location = ObjectStoreLocation(store.endpoint_url, store.region, tuple(endpoint_aliases))
        except ValueError as exc:
            raise ConfigurationError(f"S3 endpoint: {exc}") from None

    @activity.defn(name="delete_offload_segment")
    @translate_errors
    def delete_offload_segment(self, inp: DeleteOffloadInput) -> DeleteOffloadResult:
        targets = self._targets(inp.context, inp.ledger_id)
        offload = inp.context.offload_context
        assert offload is not None  # _targets refuses a context without one
        if offload.offload_segment:
            return _refuse_segments(offload)
        existing: dict[str, list[str]] = defaultdict(list)
        versioned: set[tuple[str, str]] = set()  # objects whose bytes a delete keeps as a noncurrent version
        for bucket, key in targets:
            head = self._store.head(bucket, key)
            if head is None:
                continue
            if head.versioned:
                versioned.add((bucket, key))
            problem = _ownership_problem(head.metadata, inp.managed_ledger_name, object_role(key))
            if problem:
                # Nothing is deleted, not even the objects that did match: the pair goes or stays together.
                reason = f"s3://{bucket}/{key} {problem}; nothing deleted"
                return DeleteOffloadResult(Outcome.SKIPPED_METADATA_MISMATCH, reason=reason)
            existing[bucket].append(key)
        # HEAD answers a bare 404 for a missing bucket too: before a bucket's keys count as deleted, make sure
        # the bucket is really there (a wrong bucket or endpoint raises BucketNotFound, and the request is
        # dead-lettered instead of acked with its objects left behind).
        for bucket in dict.fromkeys(b for b, _ in targets):
            if bucket not in existing:
                self._store.require_bucket(bucket)
        if not existing:
            return DeleteOffloadResult(Outcome.ALREADY_DELETED, reason="no offloaded objects left")
        markers: set[tuple[str, str]] = set()
        for bucket, keys in existing.items():
            markers.update((bucket, key) for key in self._store.delete(bucket, keys))
        # Confirm: some S3 implementations have been seen to accept DeleteObjects and keep the objects.
        still_there = [
            f"s3://{b}/{k}" for b, keys in existing.items() for k in keys if self._store.head(b, k)
        ]
        if still_there:
            raise DeletionNotConfirmed(f"still present after delete: {', '.join(still_there[:4])}")
        return DeleteOffloadResult(
            Outcome.DELETED,
            deleted_keys=[f"s3://{b}/{k}" for b, keys in existing.items() for k in keys],
            reason=_versions_kept(markers & versioned),
        )

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


def _refuse_segments(offload: OffloadContext) -> DeleteOffloadResult:
    """Streaming-offload (PIP-76) segments are never deleted for one ledger.

    A segment's object pair (``<uuid>``, ``<uuid>-index``) holds the entries of every ledger written while it
    was open: its V2 index keeps per-ledger metadata, and PIP-76 deletes a segment only once all its ledgers
    are deleted, which one request cannot show. The streaming offloader also writes no ManagedLedgerName or
    role on these objects, so nothing in them could prove the request right either.
    """
    return DeleteOffloadResult(
        Outcome.SKIPPED_METADATA_MISMATCH,
        reason=f"offloadContext lists {len(offload.offload_segment)} streaming-offload segment(s) (PIP-76); "
        "a segment can hold entries of other ledgers, so none of its objects is deleted for one ledger",
    )
