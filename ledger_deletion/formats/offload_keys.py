"""Object keys of offloaded ledgers in tiered storage (jclouds offloaders: S3, GCS, Azure, Aliyun).

Keys are flat in the bucket root (``DataBlockUtils`` / ``BlobStoreManagedLedgerOffloader``):

* classic per-ledger offload: ``<uuid>-ledger-<ledgerId>`` and ``<uuid>-ledger-<ledgerId>-index``;
* streaming (segment) offload: ``<uuid>`` and ``<uuid>-index``, one pair per ``OffloadSegment``.

The uuid is ``new java.util.UUID(uidMsb, uidLsb).toString()`` of the ids stored in the ``OffloadContext``
(signed 64-bit longs, as protobuf ``int64`` hands them to us).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # annotations only: ledger_deletion.request derives its workflow ids with offload_uuid
    from ledger_deletion.request import OffloadContext, OffloadDriverMetadata

__all__ = [
    "BUCKET_PROPERTY",
    "MANAGED_LEDGER_NAME_TAG",
    "ROLE_TAG",
    "java_uuid_parts",
    "ledger_object_keys",
    "object_role",
    "offload_keys_for_context",
    "offload_uuid",
    "segment_object_keys",
]

BUCKET_PROPERTY: Final = "bucket"
"""Driver-metadata property naming the bucket an offload went to (``TieredStorageConfiguration``)."""

# User metadata a classic offload writes on both objects since apache/pulsar#14907, lower-cased as S3 hands
# keys back: ``role`` (data | index) and the ``ManagedLedgerName`` extra metadata ManagedLedgerImpl passes.
MANAGED_LEDGER_NAME_TAG: Final = "managedledgername"
ROLE_TAG: Final = "role"

_U64 = 2**64 - 1
_S64_MIN, _S64_MAX = -(2**63), 2**63 - 1


def offload_uuid(msb: int, lsb: int) -> str:
    """``new UUID(msb, lsb).toString()``: the two signed longs are the high and low 64 bits of the uuid.

    Raises:
        ValueError: a part outside the signed (or, tolerated, unsigned) 64-bit range.
    """
    for part in (msb, lsb):
        if not _S64_MIN <= part <= _U64:
            raise ValueError(f"uuid part {part} does not fit in 64 bits")
    return str(uuid.UUID(int=((msb & _U64) << 64) | (lsb & _U64)))


def java_uuid_parts(uuid_str: str) -> tuple[int, int]:
    """The reverse of :func:`offload_uuid`: Java's ``(getMostSignificantBits(), getLeastSignificantBits())``.

    Both parts come back signed, as protobuf ``int64`` fields hold them.
    """
    value = uuid.UUID(uuid_str).int
    return _signed(value >> 64), _signed(value & _U64)


def _signed(value: int) -> int:
    return value - 2**64 if value > _S64_MAX else value


def ledger_object_keys(uuid: str, ledger_id: int) -> tuple[str, str]:
    """(data key, index key) of a classic per-ledger offload (``DataBlockUtils`` key rules)."""
    data = f"{uuid}-ledger-{ledger_id}"
    return data, f"{data}-index"


def object_role(key: str) -> str:
    """The ``role`` Pulsar writes on the object under ``key``: ``index`` for ``…-index``, else ``data``."""
    return "index" if key.endswith("-index") else "data"


def segment_object_keys(uuid: str) -> tuple[str, str]:
    """(data key, index key) of one streaming-offload segment."""
    return uuid, f"{uuid}-index"


def _bucket(*drivers: OffloadDriverMetadata | None, default: str) -> str:
    """The first non-empty ``bucket`` property of the given driver metadata, else the configured bucket.

    The broker uses the stored driver metadata when it is present, so an offload keeps pointing at the
    bucket it went to even after the broker's configured bucket changed.
    """
    for driver in drivers:
        if driver is not None and driver.properties.get(BUCKET_PROPERTY):
            return driver.properties[BUCKET_PROPERTY]
    return default


def offload_keys_for_context(
    ctx: OffloadContext, ledger_id: int, default_bucket: str
) -> list[tuple[str, str]]:
    """Every (bucket, key) an offloaded ledger may occupy, data key before index key.

    The per-ledger pair comes from the context's own uid (when set); each segment adds its pair, in the
    bucket of its own driver metadata, falling back to the context's, then to ``default_bucket``. Duplicates
    (a segment repeating the context's uid) are listed once.
    """
    keys: list[tuple[str, str]] = []
    if ctx.has_uid:
        bucket = _bucket(ctx.driver_metadata, default=default_bucket)
        ledger_uuid = offload_uuid(ctx.uid_msb, ctx.uid_lsb)
        keys.extend((bucket, key) for key in ledger_object_keys(ledger_uuid, ledger_id))
    for segment in ctx.offload_segment:
        bucket = _bucket(segment.driver_metadata, ctx.driver_metadata, default=default_bucket)
        segment_uuid = offload_uuid(segment.uid_msb, segment.uid_lsb)
        keys.extend((bucket, key) for key in segment_object_keys(segment_uuid))
    return list(dict.fromkeys(keys))
