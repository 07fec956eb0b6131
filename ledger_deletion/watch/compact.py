"""A managed ledger's references in a few bytes: what the diff and the resync read of a record, no more.

The watcher keeps one record per topic, for a million topics and more. A stored ``ManagedLedgerInfo`` is
large (every ledger's entries, size and timestamps, each offload's driver metadata with its bucket, region
and endpoint), and nothing the watcher decides reads most of it. What it reads, per listed ledger:

* the ledger id: what leaves the list is a suspect (``diff.managed_ledger_changes``), what stays is
  referenced (``Snapshot.bk_referenced``), the highest bounds "newer than listed" (``resync``);
* whether it is offloaded, and that offload's uuid, ``complete`` and ``bookkeeperDeleted`` flags and driver
  metadata: the request for its objects carries them (the service derives the object keys from the uuid,
  the bucket and store from the driver metadata, and ``check_offload_superseded`` refuses a request saying
  the offload was complete), and a changed uuid or a newly released BookKeeper copy is a suspect.

Ledger ids are stored as zigzag varint deltas in the record's order (a broker lists them ascending,
``ManagedLedgerImpl`` keeps them in a map sorted by id, so a delta is about the number of ledgers the
cluster created between two rollovers of the topic), the "offloaded" bit folded into each. A classic
offload (a uuid, no segments) is one byte of flags and driver, then its 16-byte uuid; its driver metadata is
an index into a table shared by the whole snapshot (a cluster has a handful of offload configurations).
Anything else (segments, a context without a uuid, more drivers than an index byte holds) is kept as the
``OffloadContext`` protobuf itself: rare, and exact.

Not kept: each ledger's ``entries``, ``size`` and ``timestamp``, and the offload's ``timestamp``. No check
of the service reads them (``activities/``, ``workflows/``), so a suspect's request carries them as 0; which
ledgers and objects are requested is decided by the ids, uuids and flags alone, exactly as before.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb

__all__ = ["Drivers", "LedgerRef", "decode", "encode", "ledgers", "newest", "read_varint", "write_varint"]

_UUID: Final = struct.Struct(">qq")  # uidMsb, uidLsb: Java's signed longs
_COMPLETE: Final = 0x01
_BK_DELETED: Final = 0x02
_VERBATIM: Final = 0x04  # the OffloadContext protobuf follows (length-prefixed), not a uuid
_DRIVER_SHIFT: Final = 3
_MAX_DRIVER: Final = 0xFF >> _DRIVER_SHIFT  # 31: index + 1 in the flag byte's high bits, 0 for none


class Drivers:
    """The offload driver metadata of a snapshot's records, each distinct one stored once.

    Entries are never removed: a table slot costs one driver's bytes, and there are as many as the
    cluster has offload configurations (per namespace at most), not per ledger.
    """

    def __init__(self) -> None:
        self._by_bytes: dict[bytes, int] = {}
        self._table: list[bytes] = []

    def index(self, driver: ml_pb.OffloadDriverMetadata) -> int | None:
        """The driver's slot (from 0), or None when the table is full (the caller keeps it verbatim)."""
        key = driver.SerializeToString(deterministic=True)
        found = self._by_bytes.get(key)
        if found is None:
            if len(self._table) >= _MAX_DRIVER:
                return None
            found = self._by_bytes[key] = len(self._table)
            self._table.append(key)
        return found

    def driver(self, index: int) -> bytes:
        return self._table[index]


@dataclass(frozen=True, slots=True)
class LedgerRef:
    """One listed ledger as the resync sees it: its id, and whether its BookKeeper copy was given up."""

    ledger_id: int
    released: bool


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (>= 0) as a protobuf-style base-128 varint."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _zigzag(value: int) -> int:
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


def encode(info: ml_pb.ManagedLedgerInfo, drivers: Drivers) -> bytes:
    """The references of ``info``, compactly (see the module's docstring)."""
    out = bytearray()
    previous = 0
    for li in info.ledgerInfo:
        has_ctx = li.HasField("offloadContext")
        write_varint(out, (_zigzag(li.ledgerId - previous) << 1) | has_ctx)
        previous = li.ledgerId
        if not has_ctx:
            continue
        ctx = li.offloadContext
        flags = (_COMPLETE if ctx.complete else 0) | (_BK_DELETED if ctx.bookkeeperDeleted else 0)
        slot: int | None = 0
        if ctx.HasField("driverMetadata"):
            index = drivers.index(ctx.driverMetadata)
            slot = None if index is None else index + 1
        if (ctx.uidMsb or ctx.uidLsb) and not ctx.offloadSegment and slot is not None:
            out.append(flags | (slot << _DRIVER_SHIFT))
            out += _UUID.pack(ctx.uidMsb, ctx.uidLsb)
        else:
            kept = ml_pb.OffloadContext()
            kept.CopyFrom(ctx)
            kept.ClearField("timestamp")  # as in the classic form: no check reads it
            raw = kept.SerializeToString(deterministic=True)
            out.append(flags | _VERBATIM)
            write_varint(out, len(raw))
            out += raw
    return bytes(out)


def ledgers(data: bytes) -> Iterator[LedgerRef]:
    """The listed ledgers of an encoded record, in its order, without building any protobuf."""
    pos, previous, end = 0, 0, len(data)
    while pos < end:
        head, pos = read_varint(data, pos)
        previous += _unzigzag(head >> 1)
        released = False
        if head & 1:
            flags = data[pos]
            pos += 1
            released = flags & (_COMPLETE | _BK_DELETED) == _COMPLETE | _BK_DELETED
            if flags & _VERBATIM:
                length, pos = read_varint(data, pos)
                pos += length
            else:
                pos += _UUID.size
        yield LedgerRef(previous, released)


def newest(data: bytes) -> int:
    """The highest listed ledger id, -1 for none."""
    return max((ref.ledger_id for ref in ledgers(data)), default=-1)


def decode(data: bytes, drivers: Drivers) -> ml_pb.ManagedLedgerInfo:
    """The ``ManagedLedgerInfo`` the diff reads: each ledger's id and offload context as stored."""
    info = ml_pb.ManagedLedgerInfo()
    pos, previous, end = 0, 0, len(data)
    while pos < end:
        head, pos = read_varint(data, pos)
        previous += _unzigzag(head >> 1)
        li = info.ledgerInfo.add(ledgerId=previous)
        if not head & 1:
            continue
        flags = data[pos]
        pos += 1
        if flags & _VERBATIM:
            length, pos = read_varint(data, pos)
            li.offloadContext.ParseFromString(data[pos : pos + length])
            pos += length
            continue
        ctx = li.offloadContext
        ctx.uidMsb, ctx.uidLsb = _UUID.unpack_from(data, pos)
        pos += _UUID.size
        ctx.complete = bool(flags & _COMPLETE)
        ctx.bookkeeperDeleted = bool(flags & _BK_DELETED)
        slot = flags >> _DRIVER_SHIFT
        if slot:
            ctx.driverMetadata.ParseFromString(drivers.driver(slot - 1))
    return info
