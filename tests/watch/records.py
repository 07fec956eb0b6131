"""Pulsar metadata records, written as a broker writes them, for the watcher's unit tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ledger_deletion.formats.managed_ledger import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    SchemaLocator,
    serialize_managed_cursor_info,
    serialize_managed_ledger_info,
    serialize_schema_locator,
)
from ledger_deletion.formats.offload_keys import java_uuid_parts

ML = "public/default/persistent/orders-partition-0"
ML_PATH = f"/managed-ledgers/{ML}"
TOPIC = "public/default/orders-partition-0"
UUID_A = "3f2a8c1e-9b7d-4e21-a5c3-0d9e8f7a6b5c"
UUID_B = "11111111-2222-4333-8444-555555555555"
UUID_C = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"


def managed_ledger(
    ids: Iterable[int],
    *,
    offloads: Mapping[int, str] | None = None,
    segments: Mapping[int, Iterable[str]] | None = None,
    released: Iterable[int] = (),
    complete: bool = True,
    compression: str = "NONE",
) -> bytes:
    """A ManagedLedgerInfo listing ``ids``; ``offloads`` maps a ledger to its classic offload uuid,
    ``segments`` to its segment uuids; ``released`` ledgers are marked bookkeeperDeleted."""
    info = ManagedLedgerInfo()
    for ledger_id in ids:
        li = info.ledgerInfo.add(ledgerId=ledger_id, entries=10, size=1000, timestamp=1_700_000_000_000)
        uid = (offloads or {}).get(ledger_id)
        segs = list((segments or {}).get(ledger_id, ()))
        if uid or segs:
            ctx = li.offloadContext
            ctx.complete = complete
            ctx.bookkeeperDeleted = ledger_id in set(released)
            ctx.driverMetadata.name = "aws-s3"
            ctx.driverMetadata.properties.add(key="bucket", value="pulsar-offload")
            if uid:
                ctx.uidMsb, ctx.uidLsb = java_uuid_parts(uid)
            for seg in segs:
                s = ctx.offloadSegment.add(complete=True)
                s.uidMsb, s.uidLsb = java_uuid_parts(seg)
    return serialize_managed_ledger_info(info, compression)


def cursor(ledger_id: int | None) -> bytes:
    """A ManagedCursorInfo on ``ledger_id`` (None: the position is stored inline, -1)."""
    return serialize_managed_cursor_info(
        ManagedCursorInfo(cursorsLedgerId=-1 if ledger_id is None else ledger_id, markDeleteLedgerId=1)
    )


def locator(ids: Iterable[int]) -> bytes:
    loc = SchemaLocator()
    for version, ledger_id in enumerate(ids):
        entry = loc.index.add(version=version, hash=b"h")
        entry.position.ledgerId = ledger_id
        entry.position.entryId = 0
        loc.info.CopyFrom(entry)
    return serialize_schema_locator(loc)
