"""Pulsar's own metadata records: managed-ledger info, cursor info, schema locators, and their names.

These records decide whether a ledger is still referenced, so they must be read exactly as the broker wrote
them (``MetaStoreImpl`` and ``BookkeeperSchemaStorage``):

* ``/managed-ledgers/<ml name>`` holds a binary ``ManagedLedgerInfo``; its children hold
  ``ManagedCursorInfo``. Either may be empty bytes (the broker creates the znode before the first update)
  and either may be compressed (``managedLedgerInfoCompressionType`` / ``managedCursorInfoCompressionType``),
  framed as ``[0x4778 "Gx"][int32 metadata length][*InfoMetadata][codec output]``, big-endian like Netty.
* ``/schemas/<schema id>`` holds a binary ``SchemaLocator``.

Anything that does not decode raises :class:`~ledger_deletion.errors.MetadataFormatError`, never a protobuf or
codec exception: a caller must be able to tell "the record says X" from "we could not read the record".
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from collections.abc import Iterable
from typing import Final, TypeVar

import cramjam
import lz4.block
import zstandard
from google.protobuf.message import DecodeError, EncodeError, Message

from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.formats.proto import SchemaStorageFormat_pb2 as schema_pb
from ledger_deletion.request import LedgerInfo, OffloadContext, OffloadDriverMetadata, OffloadSegment

__all__ = [
    "COMPRESSION_MAGIC",
    "MAX_UNCOMPRESSED_SIZE",
    "ManagedCursorInfo",
    "ManagedLedgerInfo",
    "PbLedgerInfo",
    "SchemaLocator",
    "ledger_info_to_request_context",
    "managed_ledger_name",
    "parse_managed_cursor_info",
    "parse_managed_ledger_info",
    "parse_schema_locator",
    "request_context_to_ledger_info",
    "schema_id_for_topic",
    "schema_ledger_ids",
    "serialize_managed_cursor_info",
    "serialize_managed_ledger_info",
    "serialize_schema_locator",
    "topic_name_from_managed_ledger",
]

# Re-exported message classes, so callers need not import the generated module themselves.
ManagedLedgerInfo = ml_pb.ManagedLedgerInfo
PbLedgerInfo = ml_pb.ManagedLedgerInfo.LedgerInfo
ManagedCursorInfo = ml_pb.ManagedCursorInfo
SchemaLocator = schema_pb.SchemaLocator

COMPRESSION_MAGIC: Final = 0x4778
"""``MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA``. No raw record can start with it: 0x47 is field 8 with wire
type 7, which does not exist, so the check cannot misfire on an uncompressed record."""

MAX_UNCOMPRESSED_SIZE: Final = 64 * 1024 * 1024
"""Refuse to inflate beyond this: ``uncompressedSize`` is read from the record itself, and a corrupt or
hostile value must not make us allocate gigabytes. Real records are bounded by the metadata store (ZooKeeper's
``jute.maxbuffer`` is 1 MiB by default) times a plausible compression ratio."""

_HEADER = struct.Struct(">HI")  # magic (short) + metadata length (int), big-endian as Netty writes them
_COMPRESSION_NAMES: Final = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")  # index = CompressionType value
_WRITABLE: Final[dict[str, ml_pb.CompressionType]] = {
    "LZ4": ml_pb.LZ4,
    "ZLIB": ml_pb.ZLIB,
    "ZSTD": ml_pb.ZSTD,
    "SNAPPY": ml_pb.SNAPPY,
}

_M = TypeVar("_M", bound=Message)
_InfoMetadata = ml_pb.ManagedLedgerInfoMetadata | ml_pb.ManagedCursorInfoMetadata


# ---------------------------------------------------------------------------------------------------------
# ManagedLedgerInfo / ManagedCursorInfo (optionally compressed)
# ---------------------------------------------------------------------------------------------------------


def ledger_list_digest(ledger_ids: Iterable[int]) -> str:
    """A short fingerprint of a topic's ledger list (the ids, in any order): the owner broker's
    internalStats ``ledgers`` and a ManagedLedgerInfo's ``ledgerInfo`` give the same one when they describe
    the same managed ledger at the same time."""
    listed = ",".join(str(i) for i in sorted(set(ledger_ids)))
    return hashlib.sha256(listed.encode()).hexdigest()[:32]


def parse_managed_ledger_info(data: bytes) -> ml_pb.ManagedLedgerInfo:
    """Decode the content of ``/managed-ledgers/<ml name>`` (empty bytes give an empty message).

    Raises:
        MetadataFormatError: the bytes are neither a valid record nor a valid compressed record.
    """
    return _parse_info(data, ml_pb.ManagedLedgerInfo, ml_pb.ManagedLedgerInfoMetadata, "ManagedLedgerInfo")


def parse_managed_cursor_info(data: bytes) -> ml_pb.ManagedCursorInfo:
    """Decode the content of ``/managed-ledgers/<ml name>/<cursor>`` (empty bytes give an empty message).

    Raises:
        MetadataFormatError: the bytes are neither a valid record nor a valid compressed record.
    """
    return _parse_info(data, ml_pb.ManagedCursorInfo, ml_pb.ManagedCursorInfoMetadata, "ManagedCursorInfo")


def serialize_managed_ledger_info(msg: ml_pb.ManagedLedgerInfo, compression: str = "NONE") -> bytes:
    """Encode as the broker would; ``compression`` other than NONE writes the ``Gx`` header + codec output.

    Unlike the broker we compress regardless of size (no threshold), so tests and the simulated cluster can
    produce every variant on demand.
    """
    return _serialize_info(msg, ml_pb.ManagedLedgerInfoMetadata(), compression)


def serialize_managed_cursor_info(msg: ml_pb.ManagedCursorInfo, compression: str = "NONE") -> bytes:
    """Cursor counterpart of :func:`serialize_managed_ledger_info`."""
    return _serialize_info(msg, ml_pb.ManagedCursorInfoMetadata(), compression)


def _parse_info(data: bytes, message_type: type[_M], metadata_type: type[_InfoMetadata], what: str) -> _M:
    data = bytes(data)
    if not data:
        # The broker creates the znode with empty content before its first update; that means "no state
        # yet", not a corrupt record, even for ManagedCursorInfo whose cursorsLedgerId is required.
        return message_type()
    if len(data) >= 2 and int.from_bytes(data[:2], "big") == COMPRESSION_MAGIC:
        data = _decompress(data, metadata_type, what)
    return _parse_message(data, message_type, what)


def _decompress(data: bytes, metadata_type: type[_InfoMetadata], what: str) -> bytes:
    if len(data) < _HEADER.size:
        raise MetadataFormatError(f"{what}: compression header truncated ({len(data)} bytes)")
    _, metadata_length = _HEADER.unpack_from(data)
    body_start = _HEADER.size + metadata_length
    if body_start > len(data):
        raise MetadataFormatError(
            f"{what}: compression metadata length {metadata_length} exceeds the record ({len(data)} bytes)"
        )
    metadata = _parse_message(data[_HEADER.size : body_start], metadata_type, f"{what} compression metadata")
    codec, size = metadata.compressionType, metadata.uncompressedSize
    payload = data[body_start:]
    name = _compression_name(codec)
    if not 0 <= size <= MAX_UNCOMPRESSED_SIZE:
        raise MetadataFormatError(f"{what}: uncompressedSize {size} is outside 0..{MAX_UNCOMPRESSED_SIZE}")
    try:
        if name == "NONE":
            out = payload
        elif name == "ZLIB":
            # Pulsar's CompressionCodecZLib uses java.util.zip.Deflater/Inflater: zlib framing (RFC 1950).
            inflater = zlib.decompressobj()
            out = inflater.decompress(payload, size + 1)
            if not inflater.eof:
                raise MetadataFormatError(f"{what}: ZLIB stream is truncated or longer than {size} bytes")
        elif name == "LZ4":
            # Pulsar's CompressionCodecLZ4 uses lz4-java's raw *block* compressor (no frame, no size prefix);
            # the size comes from the metadata, exactly what lz4.block needs.
            out = lz4.block.decompress(payload, uncompressed_size=size)
        elif name == "ZSTD":
            # CompressionCodecZstd writes a standard zstd frame. When its header carries a content size the
            # library allocates that much up front, so a corrupt header is refused before decompressing;
            # without one, max_output_size bounds the output.
            declared = zstandard.frame_content_size(payload)
            if declared not in (-1, size):
                raise MetadataFormatError(f"{what}: ZSTD frame declares {declared} bytes, header says {size}")
            out = zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
        elif name == "SNAPPY":
            # MetaStoreImpl takes every codec of CompressionCodecProvider; CompressionCodecSnappy writes
            # airlift's raw Snappy block (SnappyRawCompressor: a varint of the uncompressed length, then the
            # tagged literals and copies; no framing). The library allocates what the varint says, so it is
            # held to the header's size first.
            declared = _snappy_length(payload)
            if declared != size:
                raise MetadataFormatError(
                    f"{what}: SNAPPY block declares {declared} bytes, header says {size}"
                )
            out = bytes(cramjam.snappy.decompress_raw(payload))
        else:  # pragma: no cover - _compression_name already rejects unknown values
            raise MetadataFormatError(f"{what}: unknown compression {name}")
    except MetadataFormatError:
        raise
    except (
        zlib.error,
        lz4.block.LZ4BlockError,
        zstandard.ZstdError,
        cramjam.DecompressionError,
        ValueError,
    ) as exc:
        raise MetadataFormatError(f"{what}: {name} payload does not decompress: {exc}") from exc
    if len(out) != size:
        raise MetadataFormatError(f"{what}: {name} payload inflated to {len(out)} bytes, header says {size}")
    return bytes(out)


def _serialize_info(msg: Message, metadata: _InfoMetadata, compression: str) -> bytes:
    body = _serialize_message(msg)
    name = compression.upper()
    if name == "NONE":
        return body
    if name == "ZLIB":
        payload = zlib.compress(body)
    elif name == "LZ4":
        payload = lz4.block.compress(body, store_size=False)
    elif name == "ZSTD":
        payload = zstandard.ZstdCompressor().compress(body)
    elif name == "SNAPPY":
        payload = bytes(cramjam.snappy.compress_raw(body))
    else:
        raise ValueError(
            f"cannot write {compression!r} compression; use one of NONE, LZ4, ZLIB, ZSTD, SNAPPY"
        )
    metadata.compressionType = _WRITABLE[name]
    metadata.uncompressedSize = len(body)
    meta_bytes = metadata.SerializeToString()
    return _HEADER.pack(COMPRESSION_MAGIC, len(meta_bytes)) + meta_bytes + payload


def _snappy_length(payload: bytes) -> int:
    """The uncompressed length a raw Snappy block starts with (a little-endian base-128 varint of at most
    five bytes, as SnappyRawDecompressor reads it)."""
    length = 0
    for i, byte in enumerate(payload[:5]):
        length |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return length
    raise MetadataFormatError("SNAPPY block: its length varint is truncated or longer than five bytes")


def _compression_name(value: int) -> str:
    if 0 <= value < len(_COMPRESSION_NAMES):
        return _COMPRESSION_NAMES[value]
    raise MetadataFormatError(f"unknown compressionType {value}")  # pragma: no cover - proto2 rejects it


# ---------------------------------------------------------------------------------------------------------
# Schema locators
# ---------------------------------------------------------------------------------------------------------


def parse_schema_locator(data: bytes) -> schema_pb.SchemaLocator:
    """Decode the content of ``/schemas/<schema id>``.

    Raises:
        MetadataFormatError: empty or invalid bytes (``info`` is a required field, so empty is invalid).
    """
    return _parse_message(bytes(data), schema_pb.SchemaLocator, "SchemaLocator")


def serialize_schema_locator(msg: schema_pb.SchemaLocator) -> bytes:
    """Encode a locator as the broker stores it (plain binary protobuf, never compressed)."""
    return _serialize_message(msg)


def schema_ledger_ids(locator: schema_pb.SchemaLocator) -> set[int]:
    """Every BK ledger a schema still references.

    The broker's own list (``getSchemaLedgerList``) is the ``index`` entries; ``info`` (the latest version) is
    added defensively: it is normally one of them, and a ledger must never be deleted while it is referenced.
    """
    ids = {entry.position.ledgerId for entry in locator.index}
    if locator.HasField("info"):
        ids.add(locator.info.position.ledgerId)
    return ids


# ---------------------------------------------------------------------------------------------------------
# Protobuf helpers
# ---------------------------------------------------------------------------------------------------------


def _parse_message(data: bytes, message_type: type[_M], what: str) -> _M:
    msg = message_type()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MetadataFormatError(f"{what}: not a valid protobuf record ({len(data)} bytes): {exc}") from exc
    # The Python runtime does not enforce proto2 `required` on parse, but protobuf-java (the broker) does:
    # a record missing e.g. a ledgerId is corrupt and must not be read as "ledger 0".
    if not msg.IsInitialized():
        raise MetadataFormatError(f"{what}: record lacks required field(s) ({len(data)} bytes)")
    return msg


def _serialize_message(msg: Message) -> bytes:
    try:
        return msg.SerializeToString()
    except EncodeError as exc:
        raise ValueError(f"{type(msg).__name__} is incomplete: {exc}") from exc


# ---------------------------------------------------------------------------------------------------------
# Names (TopicName#getPersistenceNamingEncoding, #fromPersistenceNamingEncoding, #getSchemaName)
# ---------------------------------------------------------------------------------------------------------

_DOMAIN_PREFIX = re.compile(r"^(persistent|non-persistent)://")
# TopicName#getPartitionIndex: the text after the last "-partition-" must be a non-negative int without
# leading zeros ("t-partition-01" is not a partition); anything else is simply an unpartitioned name.
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]{0,9})$")
_INT32_MAX = 2**31 - 1


def _topic_parts(topic_name: str) -> list[str]:
    """Split ``[persistent://]tenant/ns/local`` (V2) or ``tenant/cluster/ns/local`` (V1) into its parts."""
    name = _DOMAIN_PREFIX.sub("", topic_name, count=1)
    parts = name.split("/")
    if len(parts) not in (3, 4) or any(not p for p in parts):
        raise ValueError(
            f"{topic_name!r} is not a topic name tenant/namespace/topic or tenant/cluster/namespace/topic"
        )
    return parts


def managed_ledger_name(topic_name: str) -> str:
    """``tenant/ns/local`` -> ``tenant/ns/persistent/local`` (V1: ``tenant/cluster/ns/persistent/local``).

    The local name is taken as already encoded (``Codec.encode``), which is the form requests carry and the
    form found in the metadata store; it is not encoded again. A ``persistent://`` prefix is accepted.
    """
    *namespace, local = _topic_parts(topic_name)
    return "/".join([*namespace, "persistent", local])


def topic_name_from_managed_ledger(ml_name: str) -> str:
    """``tenant/ns/persistent/local`` -> ``tenant/ns/local`` (the reverse of :func:`managed_ledger_name`)."""
    parts = ml_name.split("/")
    if len(parts) not in (4, 5) or any(not p for p in parts) or parts[-2] != "persistent":
        raise ValueError(
            f"{ml_name!r} is not a managed-ledger name tenant/ns/persistent/topic "
            "or tenant/cluster/ns/persistent/topic"
        )
    return "/".join(parts[:-2] + parts[-1:])


def schema_id_for_topic(topic_name: str) -> str:
    """The schema id (``/schemas/<id>``) of a topic: ``tenant/ns/<local name of the partitioned base topic>``.

    All partitions share one schema, so ``-partition-N`` is dropped. As in ``TopicName#getSchemaName`` the id
    has no domain and, for V1 names, no cluster: ``tenant/cluster/ns/t`` -> ``tenant/ns/t``.
    """
    parts = _topic_parts(topic_name)
    tenant, namespace, local = parts[0], parts[-2], parts[-1]
    match = _PARTITION.match(local)
    if match and int(match["index"]) <= _INT32_MAX:
        local = match["base"]
    return f"{tenant}/{namespace}/{local}"


# ---------------------------------------------------------------------------------------------------------
# Protobuf LedgerInfo <-> request context (ledger_deletion.request.LedgerInfo)
# ---------------------------------------------------------------------------------------------------------


def ledger_info_to_request_context(info: ml_pb.ManagedLedgerInfo.LedgerInfo) -> LedgerInfo:
    """The request's ``context`` for a ledger, built from the broker's stored ``LedgerInfo``.

    An absent ``offloadContext`` (never offloaded) stays ``None``; an absent ``endEntryId`` on a segment
    becomes the dataclass's "unknown" value -1 rather than protobuf's default 0, a real entry id.
    """
    ctx = info.offloadContext if info.HasField("offloadContext") else None
    return LedgerInfo(
        ledger_id=info.ledgerId,
        entries=info.entries,
        size=info.size,
        timestamp=info.timestamp,
        offload_context=None if ctx is None else _offload_context_from_pb(ctx),
    )


def request_context_to_ledger_info(ctx: LedgerInfo) -> ml_pb.ManagedLedgerInfo.LedgerInfo:
    """The reverse of :func:`ledger_info_to_request_context` (used to build realistic stored metadata)."""
    info = ml_pb.ManagedLedgerInfo.LedgerInfo(
        ledgerId=ctx.ledger_id, entries=ctx.entries, size=ctx.size, timestamp=ctx.timestamp
    )
    if ctx.offload_context is not None:
        info.offloadContext.CopyFrom(_offload_context_to_pb(ctx.offload_context))
    return info


def _driver_from_pb(msg: ml_pb.OffloadDriverMetadata) -> OffloadDriverMetadata:
    # KeyValue list -> dict; on a duplicate key the last one wins, as when Pulsar builds its map.
    return OffloadDriverMetadata(name=msg.name, properties={kv.key: kv.value for kv in msg.properties})


def _driver_to_pb(driver: OffloadDriverMetadata) -> ml_pb.OffloadDriverMetadata:
    return ml_pb.OffloadDriverMetadata(
        name=driver.name,
        properties=[ml_pb.KeyValue(key=k, value=v) for k, v in driver.properties.items()],
    )


def _offload_context_from_pb(ctx: ml_pb.OffloadContext) -> OffloadContext:
    return OffloadContext(
        uid_msb=ctx.uidMsb,
        uid_lsb=ctx.uidLsb,
        complete=ctx.complete,
        bookkeeper_deleted=ctx.bookkeeperDeleted,
        timestamp=ctx.timestamp,
        driver_metadata=_driver_from_pb(ctx.driverMetadata) if ctx.HasField("driverMetadata") else None,
        offload_segment=[
            OffloadSegment(
                uid_msb=seg.uidMsb,
                uid_lsb=seg.uidLsb,
                complete=seg.complete,
                assigned_timestamp=seg.assignedTimestamp,
                offloaded_timestamp=seg.offloadedTimestamp,
                end_entry_id=seg.endEntryId if seg.HasField("endEntryId") else -1,
                driver_metadata=(
                    _driver_from_pb(seg.driverMetadata) if seg.HasField("driverMetadata") else None
                ),
            )
            for seg in ctx.offloadSegment
        ],
    )


def _offload_context_to_pb(ctx: OffloadContext) -> ml_pb.OffloadContext:
    msg = ml_pb.OffloadContext(
        uidMsb=ctx.uid_msb,
        uidLsb=ctx.uid_lsb,
        complete=ctx.complete,
        bookkeeperDeleted=ctx.bookkeeper_deleted,
        timestamp=ctx.timestamp,
    )
    if ctx.driver_metadata is not None:
        msg.driverMetadata.CopyFrom(_driver_to_pb(ctx.driver_metadata))
    for seg in ctx.offload_segment:
        pb_seg = msg.offloadSegment.add(
            uidMsb=seg.uid_msb,
            uidLsb=seg.uid_lsb,
            complete=seg.complete,
            assignedTimestamp=seg.assigned_timestamp,
            offloadedTimestamp=seg.offloaded_timestamp,
        )
        if seg.end_entry_id != -1:
            pb_seg.endEntryId = seg.end_entry_id
        if seg.driver_metadata is not None:
            pb_seg.driverMetadata.CopyFrom(_driver_to_pb(seg.driver_metadata))
    return msg
