"""Activity that deletes an offloaded ledger's objects from tiered storage and confirms they are gone."""

from __future__ import annotations

from collections import defaultdict

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.contracts import DeleteOffloadInput, DeleteOffloadResult, Outcome
from ledger_deletion.errors import DeletionNotConfirmed, InvalidRequestError, UnsupportedOffloadDriver
from ledger_deletion.formats.offload_keys import offload_keys_for_context
from ledger_deletion.request import LedgerInfo

# jclouds provider names whose blobs live in an S3-compatible store this service can reach.
S3_DRIVERS = frozenset({"aws-s3", "s3", "S3", "AWS_S3"})
# Blob user metadata Pulsar's offloader writes (S3 lower-cases metadata keys).
MANAGED_LEDGER_NAME_KEY = "managedledgername"


class OffloadActivities:
    def __init__(self, store: ObjectStore, default_bucket: str) -> None:
        self._store = store
        self._default_bucket = default_bucket

    @activity.defn(name="delete_offload_segment")
    @translate_errors
    def delete_offload_segment(self, inp: DeleteOffloadInput) -> DeleteOffloadResult:
        targets = self._targets(inp.context, inp.ledger_id)
        existing: dict[str, list[str]] = defaultdict(list)
        for bucket, key in targets:
            head = self._store.head(bucket, key)
            if head is None:
                continue
            owner = head.metadata.get(MANAGED_LEDGER_NAME_KEY)
            if owner is not None and owner != inp.managed_ledger_name:
                return DeleteOffloadResult(
                    Outcome.SKIPPED_METADATA_MISMATCH,
                    reason=f"s3://{bucket}/{key} belongs to {owner!r}, "
                    f"request says {inp.managed_ledger_name!r}",
                )
            existing[bucket].append(key)
        if not existing:
            return DeleteOffloadResult(Outcome.ALREADY_DELETED, reason="no offloaded objects left")
        for bucket, keys in existing.items():
            self._store.delete(bucket, keys)
        # Confirm: some S3 implementations have been seen to accept DeleteObjects and keep the objects.
        still_there = [
            f"s3://{b}/{k}" for b, keys in existing.items() for k in keys if self._store.head(b, k)
        ]
        if still_there:
            raise DeletionNotConfirmed(f"still present after delete: {', '.join(still_there[:4])}")
        return DeleteOffloadResult(
            Outcome.DELETED, deleted_keys=[f"s3://{b}/{k}" for b, keys in existing.items() for k in keys]
        )

    def _targets(self, context: LedgerInfo, ledger_id: int) -> list[tuple[str, str]]:
        offload = context.offload_context
        if offload is None:
            raise InvalidRequestError("OFFLOAD_LEDGER request without offloadContext")
        drivers = [offload.driver_metadata] + [s.driver_metadata for s in offload.offload_segment]
        for driver in drivers:
            if driver is not None and driver.name not in S3_DRIVERS:
                raise UnsupportedOffloadDriver(f"offload driver {driver.name!r} is not S3-compatible")
        targets = offload_keys_for_context(offload, ledger_id, self._default_bucket)
        if not targets:
            raise InvalidRequestError("offloadContext yields no object keys")
        return targets
