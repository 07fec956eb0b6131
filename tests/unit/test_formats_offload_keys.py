"""Tiered-storage object keys: Java UUID rendering, per-ledger and segment keys, bucket selection, and
whether driver metadata names the object store the service reaches."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ledger_deletion.formats.offload_keys import (
    ObjectStoreLocation,
    java_uuid_parts,
    ledger_object_keys,
    normalise_endpoint,
    offload_keys_for_context,
    offload_uuid,
    segment_object_keys,
)
from ledger_deletion.request import OffloadContext, OffloadDriverMetadata, OffloadSegment
from ledger_deletion.settings import Settings

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


# --- which object store the driver metadata names ---------------------------------------------------------

SERVICE = ObjectStoreLocation("http://127.0.0.1:19000", "us-east-1")
AWS = ObjectStoreLocation("", "eu-west-1")  # the service uses AWS's own endpoint for its region


def _named(**props):
    return OffloadDriverMetadata("aws-s3", {"managedLedgerOffloadDriver": "aws-s3", "bucket": "b", **props})


@pytest.mark.parametrize(
    ("spelling", "normalised"),
    [
        ("http://127.0.0.1:19000", "http://127.0.0.1:19000"),
        ("HTTP://127.0.0.1:19000/", "http://127.0.0.1:19000"),
        ("http://MinIO.Example.:80//", "http://minio.example:80"),
        ("http://minio.example", "http://minio.example:80"),
        ("https://minio.example", "https://minio.example:443"),
        ("minio.example", "https://minio.example:443"),  # no scheme: jclouds' and the AWS SDKs' https
        (" https://[::1]:9000/base/ ", "https://[::1]:9000/base"),
    ],
)
def test_normalise_endpoint(spelling, normalised):
    assert normalise_endpoint(spelling) == normalised


@pytest.mark.parametrize("bad", ["ftp://host", "http://", "http://host:port", "http:///path"])
def test_normalise_endpoint_refuses_what_is_not_an_http_url(bad):
    with pytest.raises(ValueError):
        normalise_endpoint(bad)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:19000",
        "HTTP://127.0.0.1:19000/",
        "http://127.0.0.1:19000//",
        " http://127.0.0.1:19000",
    ],
)
def test_the_same_endpoint_in_another_spelling_is_accepted(endpoint):
    assert SERVICE.refusal(_named(serviceEndpoint=endpoint, region="us-east-1")) == ""
    assert SERVICE.refusal(_named(serviceEndpoint=endpoint, region="US-East-1")) == ""


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://minio-b:9000",  # the reviewer's second MinIO
        "http://127.0.0.1:19001",  # another port
        "https://127.0.0.1:19000",  # another scheme
        "http://localhost:19000",  # maybe the same, maybe not: only an alias says so
        "http://127.0.0.1:19000/other",
        "https://s3.amazonaws.com",  # AWS, while the service talks to its own endpoint
        "127.0.0.1:19000",  # no scheme means https
        "http://127.0.0.1:port",  # not a URL at all
    ],
)
def test_another_endpoint_is_refused(endpoint):
    assert repr(endpoint) in SERVICE.refusal(_named(serviceEndpoint=endpoint))


@pytest.mark.parametrize("region", ["eu-west-1", "us-east-2"])
def test_another_region_is_refused(region):
    assert f"region {region!r}" in SERVICE.refusal(_named(region=region))
    assert f"region {region!r}" in SERVICE.refusal(
        _named(region=region, serviceEndpoint="http://127.0.0.1:19000")
    )


@pytest.mark.parametrize(
    "driver",
    [
        None,  # no driver metadata at all
        OffloadDriverMetadata("aws-s3"),
        _named(),
        _named(region="", serviceEndpoint=""),  # what TieredStorageConfiguration writes for unset settings
        _named(region="  ", serviceEndpoint=" "),
    ],
)
def test_nothing_named_means_the_service_store(driver):
    assert SERVICE.refusal(driver) == ""
    assert AWS.refusal(driver) == ""


def test_what_devstack_and_the_benchmarks_write_is_accepted():
    """devstack.cluster writes the S3 client's own endpoint and region; reconcile's generator an empty one."""
    assert SERVICE.refusal(_named(region="us-east-1", serviceEndpoint="http://127.0.0.1:19000")) == ""
    assert SERVICE.refusal(_named(region="us-east-1", serviceEndpoint="")) == ""


def test_aliases_name_the_same_store():
    proxied = ObjectStoreLocation("http://127.0.0.1:24901", "us-east-1", ("http://127.0.0.1:19000/",))
    assert proxied.refusal(_named(serviceEndpoint="http://127.0.0.1:19000")) == ""
    assert proxied.refusal(_named(serviceEndpoint="http://127.0.0.1:24901")) == ""
    assert proxied.refusal(_named(serviceEndpoint="http://minio-b:9000")) != ""


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://s3.amazonaws.com",  # global: serves every region's buckets
        "https://s3.eu-west-1.amazonaws.com",
        "https://S3.EU-WEST-1.amazonaws.com:443/",
        "https://s3-eu-west-1.amazonaws.com",
        "https://s3.dualstack.eu-west-1.amazonaws.com",
        "s3.eu-west-1.amazonaws.com",
    ],
)
def test_aws_default_endpoint_accepts_aws_endpoints_of_its_region(endpoint):
    assert AWS.refusal(_named(serviceEndpoint=endpoint)) == ""
    explicit = ObjectStoreLocation("https://s3.eu-west-1.amazonaws.com", "eu-west-1")
    assert explicit.refusal(_named(serviceEndpoint=endpoint)) == ""


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://s3.us-east-1.amazonaws.com",
        "https://s3-external-1.amazonaws.com",  # us-east-1
        "https://s3.amazonaws.com:8443",  # not AWS's port: not AWS
        "http://minio-b:9000",
        "https://s3.eu-west-1.example.com",
    ],
)
def test_aws_default_endpoint_refuses_other_regions_and_stores(endpoint):
    assert AWS.refusal(_named(serviceEndpoint=endpoint)) != ""


def test_aws_region_in_metadata_must_be_the_service_region():
    assert AWS.refusal(_named(region="eu-west-1", serviceEndpoint="https://s3.amazonaws.com")) == ""
    assert AWS.refusal(_named(region="us-east-1", serviceEndpoint="https://s3.amazonaws.com")) != ""


def test_a_location_that_is_not_a_url_is_a_value_error():
    with pytest.raises(ValueError):
        ObjectStoreLocation("ftp://store", "us-east-1")
    with pytest.raises(ValueError):
        ObjectStoreLocation("http://store", "us-east-1", ("http://alias:x",))


def test_settings_read_and_check_endpoint_aliases():
    settings = Settings(s3_endpoint_aliases=" http://a:9000/ , https://b ,")
    assert settings.s3_endpoint_alias_list == ("http://a:9000/", "https://b")
    assert Settings().s3_endpoint_alias_list == ()
    with pytest.raises(ValidationError, match="s3_endpoint_aliases"):
        Settings(s3_endpoint_aliases="http://a:port")
