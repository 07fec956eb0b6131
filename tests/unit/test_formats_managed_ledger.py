"""Pulsar metadata-store records: ManagedLedgerInfo / ManagedCursorInfo (plain and compressed), schema
locators, managed-ledger and schema names, and the LedgerInfo <-> request-context conversion."""

import contextlib
import struct
import zlib

import lz4.block
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats import managed_ledger as ml
from ledger_deletion.formats.offload_keys import offload_keys_for_context
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.formats.proto import SchemaStorageFormat_pb2 as schema_pb
from ledger_deletion.request import LedgerInfo, OffloadContext, OffloadDriverMetadata, OffloadSegment

# ManagedLedgerInfo{ledgerInfo{ledgerId=12, entries=100, size=3000}} assembled from the tag bytes:
# 0a <len 7> | 08 0c (ledgerId 12) | 10 64 (entries 100) | 18 b8 17 (size 3000)
HAND_ASSEMBLED = bytes.fromhex("0a07080c106418b817")


def test_hand_assembled_ledger_info():
    info = ml.parse_managed_ledger_info(HAND_ASSEMBLED)
    assert len(info.ledgerInfo) == 1
    li = info.ledgerInfo[0]
    assert (li.ledgerId, li.entries, li.size) == (12, 100, 3000)
    assert not li.HasField("offloadContext")
    assert ml.serialize_managed_ledger_info(info) == HAND_ASSEMBLED


def test_hand_assembled_offload_context():
    # LedgerInfo{ledgerId=12, offloadContext{uidMsb=1, uidLsb=2, complete=true}}
    ctx = bytes.fromhex("080110021801")
    li = bytes.fromhex("080c") + b"\x2a" + bytes([len(ctx)]) + ctx
    info = ml.parse_managed_ledger_info(b"\x0a" + bytes([len(li)]) + li)
    oc = info.ledgerInfo[0].offloadContext
    assert (oc.uidMsb, oc.uidLsb, oc.complete, oc.bookkeeperDeleted) == (1, 2, True, False)


def test_empty_bytes_are_an_empty_record():
    assert ml.parse_managed_ledger_info(b"") == ml_pb.ManagedLedgerInfo()
    assert ml.parse_managed_cursor_info(b"") == ml_pb.ManagedCursorInfo()


def _sample_info():
    info = ml_pb.ManagedLedgerInfo()
    for i in range(50):
        info.ledgerInfo.add(ledgerId=1000 + i, entries=100, size=4096, timestamp=1_700_000_000_000 + i)
    info.properties.add(key="k", value="v")
    info.terminatedPosition.ledgerId = 1049
    info.terminatedPosition.entryId = 99
    return info


def _sample_cursor():
    cursor = ml_pb.ManagedCursorInfo(
        cursorsLedgerId=77, markDeleteLedgerId=1000, markDeleteEntryId=5, lastActive=9
    )
    rng = cursor.individualDeletedMessages.add()
    rng.lowerEndpoint.ledgerId, rng.lowerEndpoint.entryId = 1000, 7
    rng.upperEndpoint.ledgerId, rng.upperEndpoint.entryId = 1000, 9
    cursor.properties.add(name="p", value=-3)
    batch = cursor.batchedEntryDeletionIndexInfo.add(deleteSet=[1, -2])
    batch.position.ledgerId, batch.position.entryId = 1000, 10
    cursor.cursorProperties.add(name="s", value="t")
    return cursor


@pytest.mark.parametrize("compression", ["NONE", "ZLIB", "LZ4", "ZSTD", "zstd", "SNAPPY"])
def test_ledger_info_round_trip(compression):
    info = _sample_info()
    data = ml.serialize_managed_ledger_info(info, compression)
    if compression != "NONE":
        assert data[:2] == b"Gx"
    assert ml.parse_managed_ledger_info(data) == info


@pytest.mark.parametrize("compression", ["NONE", "ZLIB", "LZ4", "ZSTD", "SNAPPY"])
def test_cursor_info_round_trip(compression):
    cursor = _sample_cursor()
    assert ml.parse_managed_cursor_info(ml.serialize_managed_cursor_info(cursor, compression)) == cursor


@pytest.mark.parametrize("compression", ["ZLIB", "LZ4", "ZSTD", "SNAPPY"])
def test_empty_record_compressed(compression):
    data = ml.serialize_managed_ledger_info(ml_pb.ManagedLedgerInfo(), compression)
    assert ml.parse_managed_ledger_info(data) == ml_pb.ManagedLedgerInfo()


def _framed(codec, payload, size, metadata_type=ml_pb.ManagedLedgerInfoMetadata):
    meta = metadata_type(compressionType=codec, uncompressedSize=size).SerializeToString()
    return struct.pack(">HI", 0x4778, len(meta)) + meta + payload


@pytest.mark.parametrize(
    ("codec", "compress"),
    [
        (ml_pb.NONE, lambda b: b),
        (ml_pb.ZLIB, zlib.compress),
        (ml_pb.LZ4, lambda b: lz4.block.compress(b, store_size=False)),
        # A zstd frame without the content size in its header, as streaming encoders write it.
        (ml_pb.ZSTD, lambda b: zstandard.ZstdCompressor(write_content_size=False).compress(b)),
    ],
)
def test_hand_framed_records(codec, compress):
    body = _sample_info().SerializeToString()
    data = _framed(codec, compress(body), len(body))
    assert data[:2] == b"\x47\x78"
    assert ml.parse_managed_ledger_info(data) == _sample_info()


def test_snappy_raw_block_as_airlift_writes_it():
    # CompressionCodecSnappy (airlift SnappyRawCompressor): varint length 9, one literal of 9 bytes (tag
    # (9-1)<<2), no stream framing. Then "abc" + a copy of 6 bytes at offset 3 (tag (6-4)<<2|1, offset 3).
    literal = bytes([9, (9 - 1) << 2]) + HAND_ASSEMBLED
    assert ml.parse_managed_ledger_info(_framed(ml_pb.SNAPPY, literal, 9)).ledgerInfo[0].ledgerId == 12
    cursor = ml_pb.ManagedCursorInfo(cursorsLedgerId=7).SerializeToString()
    block = bytes([len(cursor), (len(cursor) - 1) << 2]) + cursor
    framed = _framed(ml_pb.SNAPPY, block, len(cursor), ml_pb.ManagedCursorInfoMetadata)
    assert ml.parse_managed_cursor_info(framed).cursorsLedgerId == 7


def test_snappy_length_must_match_the_header():
    body = HAND_ASSEMBLED
    lying = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F, (9 - 1) << 2]) + body  # claims 4 GiB
    with pytest.raises(MetadataFormatError, match="SNAPPY block declares"):
        ml.parse_managed_ledger_info(_framed(ml_pb.SNAPPY, lying, len(body)))
    with pytest.raises(MetadataFormatError, match="varint"):
        ml.parse_managed_ledger_info(_framed(ml_pb.SNAPPY, b"\xff" * 6, len(body)))
    with pytest.raises(MetadataFormatError, match="SNAPPY payload does not decompress"):
        ml.parse_managed_ledger_info(_framed(ml_pb.SNAPPY, bytes([9, 0xFF]), 9))


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # not protobuf
        b"\x0a\x07\x08\x0c",  # truncated
        b"\x0a\x00",  # LedgerInfo without its required ledgerId
        b"Gx",  # header truncated
        b"Gx\x00\x00\x00\x10\x08\x02",  # metadata length beyond the record
        b"Gx\x00\x00\x00\x02\xff\xff",  # metadata not protobuf
        b"Gx\x00\x00\x00\x02\x08\x02",  # metadata lacks uncompressedSize
        _framed(ml_pb.ZLIB, b"not zlib", 10),
        _framed(ml_pb.LZ4, b"\xff\xff\xff", 10),
        _framed(ml_pb.ZSTD, b"not zstd", 10),
        _framed(ml_pb.ZLIB, zlib.compress(HAND_ASSEMBLED), len(HAND_ASSEMBLED) - 1),  # size lies (too small)
        _framed(ml_pb.ZLIB, zlib.compress(HAND_ASSEMBLED), len(HAND_ASSEMBLED) + 1),  # size lies (too big)
        _framed(ml_pb.ZLIB, zlib.compress(HAND_ASSEMBLED)[:-3], len(HAND_ASSEMBLED)),  # truncated stream
        _framed(ml_pb.ZSTD, zstandard.ZstdCompressor().compress(HAND_ASSEMBLED), 3),
        _framed(ml_pb.NONE, HAND_ASSEMBLED, len(HAND_ASSEMBLED) + 5),
        _framed(ml_pb.LZ4, b"", -1),  # negative size
        _framed(ml_pb.LZ4, b"", 2**31 - 1),  # absurd size: refused before allocating
        _framed(ml_pb.NONE, b"\xff\xff", 2),  # decompresses fine, payload is garbage
        # A zstd frame whose corrupted header declares an enormous content size (found by fuzzing: the
        # library would try to allocate it before noticing anything wrong).
        bytes.fromhex("4778000000040803100a28b52ffdd00a5100000a0808012a043ae20801"),
    ],
)
def test_garbage_is_metadata_format_error(data):
    with pytest.raises(MetadataFormatError):
        ml.parse_managed_ledger_info(data)


def test_cursor_garbage():
    with pytest.raises(MetadataFormatError):
        ml.parse_managed_cursor_info(b"\x10\x01")  # lacks required cursorsLedgerId


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_escape_as_other_errors(data):
    for parse in (ml.parse_managed_ledger_info, ml.parse_managed_cursor_info, ml.parse_schema_locator):
        with contextlib.suppress(MetadataFormatError):
            parse(data)


# --- schema locators ---------------------------------------------------------------------------------


def _index(version, ledger_id, entry_id=0):
    return schema_pb.IndexEntry(
        version=version, position=schema_pb.PositionInfo(ledgerId=ledger_id, entryId=entry_id), hash=b"h"
    )


def test_schema_locator_round_trip_and_ledgers():
    locator = schema_pb.SchemaLocator(info=_index(2, 30), index=[_index(0, 10), _index(1, 20), _index(2, 30)])
    data = ml.serialize_schema_locator(locator)
    parsed = ml.parse_schema_locator(data)
    assert parsed == locator
    assert ml.schema_ledger_ids(parsed) == {10, 20, 30}


def test_schema_locator_info_counted_even_if_missing_from_index():
    locator = schema_pb.SchemaLocator(info=_index(3, 40), index=[_index(0, 10)])
    assert ml.schema_ledger_ids(locator) == {10, 40}


def test_schema_locator_known_bytes():
    # SchemaLocator{info: IndexEntry{version 0, position {ledgerId 5, entryId 0}, hash ""}}
    entry = bytes.fromhex("08001204080510001a00")
    data = b"\x0a" + bytes([len(entry)]) + entry
    assert ml.schema_ledger_ids(ml.parse_schema_locator(data)) == {5}


@pytest.mark.parametrize("data", [b"", b"\x12\x00", b"\xff"])
def test_schema_locator_garbage(data):
    with pytest.raises(MetadataFormatError):
        ml.parse_schema_locator(data)


# --- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "ml_name"),
    [
        ("public/default/orders", "public/default/persistent/orders"),
        ("public/default/orders-partition-3", "public/default/persistent/orders-partition-3"),
        ("tenant/cluster/ns/t", "tenant/cluster/ns/persistent/t"),
        ("a/b/with%3Acolon", "a/b/persistent/with%3Acolon"),
    ],
)
def test_managed_ledger_names(topic, ml_name):
    assert ml.managed_ledger_name(topic) == ml_name
    assert ml.managed_ledger_name(f"persistent://{topic}") == ml_name
    assert ml.topic_name_from_managed_ledger(ml_name) == topic


@pytest.mark.parametrize("bad", ["a/b", "a/b/c/d/e", "a//c", "", "a/b/c/"])
def test_bad_topic_names(bad):
    with pytest.raises(ValueError):
        ml.managed_ledger_name(bad)


@pytest.mark.parametrize(
    "bad", ["a/b/c", "a/b/non-persistent/c", "a/b/c/persistent/d/e", "a/b/persistent/", "a/b/c/d"]
)
def test_bad_managed_ledger_names(bad):
    with pytest.raises(ValueError):
        ml.topic_name_from_managed_ledger(bad)


@pytest.mark.parametrize(
    ("topic", "schema_id"),
    [
        ("public/default/orders-partition-3", "public/default/orders"),
        ("public/default/orders", "public/default/orders"),
        ("persistent://public/default/orders-partition-0", "public/default/orders"),
        ("public/default/a-partition-1-partition-2", "public/default/a-partition-1"),  # last suffix only
        ("public/default/orders-partition-01", "public/default/orders-partition-01"),  # not a partition
        ("public/default/orders-partition-x", "public/default/orders-partition-x"),
        ("public/default/orders-partition-", "public/default/orders-partition-"),
        ("public/default/o-partition-99999999999", "public/default/o-partition-99999999999"),  # > int32
        ("tenant/cluster/ns/t-partition-2", "tenant/ns/t"),  # V1: TopicName#getSchemaName drops the cluster
    ],
)
def test_schema_ids(topic, schema_id):
    assert ml.schema_id_for_topic(topic) == schema_id


# --- LedgerInfo <-> request context --------------------------------------------------------------------


def _full_context():
    return LedgerInfo(
        ledger_id=12,
        entries=100,
        size=3000,
        timestamp=1_700_000_000_000,
        offload_context=OffloadContext(
            uid_msb=4551604436496895521,
            uid_lsb=-6502338462329705636,
            complete=True,
            bookkeeper_deleted=True,
            timestamp=1_700_000_100_000,
            driver_metadata=OffloadDriverMetadata(
                name="aws-s3", properties={"bucket": "b1", "region": "r", "serviceEndpoint": ""}
            ),
            offload_segment=[
                OffloadSegment(
                    uid_msb=1,
                    uid_lsb=2,
                    complete=True,
                    assigned_timestamp=3,
                    offloaded_timestamp=4,
                    end_entry_id=49,
                    driver_metadata=OffloadDriverMetadata(name="aws-s3", properties={"bucket": "b2"}),
                ),
                OffloadSegment(uid_msb=5, uid_lsb=6),
            ],
        ),
    )


def test_request_context_round_trip():
    ctx = _full_context()
    pb = ml.request_context_to_ledger_info(ctx)
    assert ml.ledger_info_to_request_context(pb) == ctx
    # and through the stored bytes
    info = ml_pb.ManagedLedgerInfo(ledgerInfo=[pb])
    stored = ml.parse_managed_ledger_info(ml.serialize_managed_ledger_info(info, "ZSTD"))
    assert ml.ledger_info_to_request_context(stored.ledgerInfo[0]) == ctx


def test_context_feeds_offload_keys():
    ctx = ml.ledger_info_to_request_context(ml.request_context_to_ledger_info(_full_context()))
    assert ctx.offload_context is not None
    buckets = [
        bucket for bucket, _ in offload_keys_for_context(ctx.offload_context, ctx.ledger_id, "default")
    ]
    assert buckets == ["b1", "b1", "b2", "b2", "b1", "b1"]


def test_conversion_of_sparse_records():
    pb = ml_pb.ManagedLedgerInfo.LedgerInfo(ledgerId=3)
    assert ml.ledger_info_to_request_context(pb) == LedgerInfo(ledger_id=3)
    pb.offloadContext.offloadSegment.add(uidMsb=1)
    pb.offloadContext.driverMetadata.name = "aws-s3"
    pb.offloadContext.driverMetadata.properties.add(key="bucket", value="old")
    pb.offloadContext.driverMetadata.properties.add(key="bucket", value="new")
    ctx = ml.ledger_info_to_request_context(pb)
    assert ctx.offload_context is not None
    assert ctx.offload_context.driver_metadata == OffloadDriverMetadata(
        name="aws-s3", properties={"bucket": "new"}
    )
    seg = ctx.offload_context.offload_segment[0]
    assert seg.end_entry_id == -1 and seg.driver_metadata is None
    assert not ctx.offload_context.has_uid
    assert not ml.request_context_to_ledger_info(ctx).offloadContext.offloadSegment[0].HasField("endEntryId")
