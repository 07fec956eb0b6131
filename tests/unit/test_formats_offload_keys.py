"""Tiered-storage object keys: Java UUID rendering, per-ledger and segment keys, bucket selection."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger_deletion.formats.offload_keys import (
    java_uuid_parts,
    ledger_object_keys,
    offload_keys_for_context,
    offload_uuid,
    segment_object_keys,
)
from ledger_deletion.request import OffloadContext, OffloadDriverMetadata, OffloadSegment

MSB, LSB = 4551604436496895521, -6502338462329705636
UUID = "3f2a8c1e-9b7d-4e21-a5c3-0d9e8f7a6b5c"


def test_java_uuid_vector():
    assert offload_uuid(MSB, LSB) == UUID
    assert java_uuid_parts(UUID) == (MSB, LSB)


@pytest.mark.parametrize(
    ("msb", "lsb", "text"),
    [
        (0, 0, "00000000-0000-0000-0000-000000000000"),
        (-1, -1, "ffffffff-ffff-ffff-ffff-ffffffffffff"),
        (-(2**63), 1, "80000000-0000-0000-0000-000000000001"),
        (2**63 - 1, -(2**63), "7fffffff-ffff-ffff-8000-000000000000"),
    ],
)
def test_signed_edges(msb, lsb, text):
    assert offload_uuid(msb, lsb) == text
    assert java_uuid_parts(text) == (msb, lsb)


@pytest.mark.parametrize(("msb", "lsb"), [(2**64, 0), (0, -(2**63) - 1)])
def test_out_of_range(msb, lsb):
    with pytest.raises(ValueError):
        offload_uuid(msb, lsb)


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
def test_uuid_round_trip(msb, lsb):
    text = offload_uuid(msb, lsb)
    assert uuid.UUID(text)
    assert java_uuid_parts(text) == (msb, lsb)


def test_object_keys():
    assert ledger_object_keys(UUID, 12) == (f"{UUID}-ledger-12", f"{UUID}-ledger-12-index")
    assert segment_object_keys(UUID) == (UUID, f"{UUID}-index")


def _driver(bucket=None):
    props = {"managedLedgerOffloadDriver": "AWS_S3", "region": "us-east-1", "serviceEndpoint": ""}
    if bucket is not None:
        props["bucket"] = bucket
    return OffloadDriverMetadata(name="aws-s3", properties=props)


def test_per_ledger_context_uses_driver_bucket():
    ctx = OffloadContext(uid_msb=MSB, uid_lsb=LSB, complete=True, driver_metadata=_driver("offload-a"))
    assert offload_keys_for_context(ctx, 12, "configured") == [
        ("offload-a", f"{UUID}-ledger-12"),
        ("offload-a", f"{UUID}-ledger-12-index"),
    ]


@pytest.mark.parametrize("driver", [None, _driver(), _driver("")])
def test_per_ledger_context_falls_back_to_default_bucket(driver):
    ctx = OffloadContext(uid_msb=MSB, uid_lsb=LSB, driver_metadata=driver)
    assert offload_keys_for_context(ctx, 7, "configured") == [
        ("configured", f"{UUID}-ledger-7"),
        ("configured", f"{UUID}-ledger-7-index"),
    ]


def test_segments_bucket_precedence():
    u1, u2 = (1, 2), (3, 4)
    ctx = OffloadContext(
        driver_metadata=_driver("ctx-bucket"),
        offload_segment=[
            OffloadSegment(uid_msb=u1[0], uid_lsb=u1[1], driver_metadata=_driver("seg-bucket")),
            OffloadSegment(uid_msb=u2[0], uid_lsb=u2[1], driver_metadata=_driver("")),
        ],
    )
    s1, s2 = offload_uuid(*u1), offload_uuid(*u2)
    assert not ctx.has_uid
    assert offload_keys_for_context(ctx, 9, "configured") == [
        ("seg-bucket", s1),
        ("seg-bucket", f"{s1}-index"),
        ("ctx-bucket", s2),
        ("ctx-bucket", f"{s2}-index"),
    ]


def test_uid_and_segments_together_and_dedup():
    seg = OffloadSegment(uid_msb=MSB, uid_lsb=LSB)
    ctx = OffloadContext(uid_msb=MSB, uid_lsb=LSB, offload_segment=[seg, seg])
    assert offload_keys_for_context(ctx, 12, "b") == [
        ("b", f"{UUID}-ledger-12"),
        ("b", f"{UUID}-ledger-12-index"),
        ("b", UUID),
        ("b", f"{UUID}-index"),
    ]


def test_empty_context_has_no_keys():
    assert offload_keys_for_context(OffloadContext(), 1, "b") == []
