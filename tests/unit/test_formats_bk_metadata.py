"""BookKeeper ledger metadata (LedgerMetadataSerDe): headers, v1 text, v2 TextFormat, v3 binary."""

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.bk_metadata import (
    LedgerMetadata,
    build_pulsar_ledger_metadata,
    cursor_custom_metadata,
    header,
    managed_ledger_custom_metadata,
    parse_ledger_metadata,
    schema_custom_metadata,
    serialize_ledger_metadata,
)

V3_HEADER = bytes.fromhex(
    "42 6f 6f 6b 69 65 4d 65 74 61 64 61 74 61 46 6f 72 6d 61 74 56 65 72 73 69 6f 6e 09 33 0a"
)
APPLICATION_PULSAR_ENTRY = bytes.fromhex(
    "5a 15 0a 0b 61 70 70 6c 69 63 61 74 69 6f 6e 12 06 70 75 6c 73 61 72"
)
ML_NAME = "public/default/persistent/orders-partition-3"

# A v2 record as protobuf-java's TextFormat printer writes it (BK 4.9 default), with octal escapes.
V2_TEXT = (
    b"BookieMetadataFormatVersion\t2\n"
    b"quorumSize: 2\n"
    b"ensembleSize: 3\n"
    b"length: 4096\n"
    b"lastEntryId: 41\n"
    b"state: CLOSED\n"
    b"segment {\n"
    b'  ensembleMember: "10.0.0.1:3181"\n'
    b'  ensembleMember: "10.0.0.2:3181"\n'
    b'  ensembleMember: "10.0.0.3:3181"\n'
    b"  firstEntryId: 0\n"
    b"}\n"
    b"segment {\n"
    b'  ensembleMember: "10.0.0.1:3181"\n'
    b'  ensembleMember: "10.0.0.4:3181"\n'
    b'  ensembleMember: "10.0.0.3:3181"\n'
    b"  firstEntryId: 20\n"
    b"}\n"
    b"digestType: CRC32C\n"
    b'password: ""\n'
    b"ackQuorumSize: 2\n"
    b"ctime: 1700000000000\n"
    b"customMetadata {\n"
    b'  key: "application"\n'
    b'  value: "pulsar"\n'
    b"}\n"
    b"customMetadata {\n"
    b'  key: "component"\n'
    b'  value: "managed-ledger"\n'
    b"}\n"
    b"customMetadata {\n"
    b'  key: "pulsar/managed-ledger"\n'
    b'  value: "public/default/persistent/orders-partition-3"\n'
    b"}\n"
    b"customMetadata {\n"
    b'  key: "binary"\n'
    b'  value: "\\377\\000"\n'
    b"}\n"
)

V1_TEXT = (
    b"BookieMetadataFormatVersion\t1\n"
    b"2\n"
    b"3\n"
    b"512\n"
    b"0\t10.0.0.1:3181\t10.0.0.2:3181\t10.0.0.3:3181\n"
    b"7\t10.0.0.1:3181\t10.0.0.4:3181\t10.0.0.3:3181\n"
    b"9\tCLOSED"
)


def test_v3_known_bytes():
    data = build_pulsar_ledger_metadata({"application": "pulsar"}, ctoken=42)
    assert data.startswith(V3_HEADER)
    assert APPLICATION_PULSAR_ENTRY in data
    assert header(3) == V3_HEADER
    # varint32 length prefix, then exactly that many bytes of LedgerMetadataFormat
    size = data[len(V3_HEADER)]
    assert size < 0x80 and len(data) == len(V3_HEADER) + 1 + size
    assert data.endswith(b"\x60\x2a")  # field 12 (cToken) = 42, the highest field number comes last


def test_v3_parse_pulsar_ledger():
    data = build_pulsar_ledger_metadata(
        managed_ledger_custom_metadata(ML_NAME), length=3000, last_entry_id=99, ctoken=7, ctime=1234
    )
    md = parse_ledger_metadata(data)
    assert md == LedgerMetadata(
        format_version=3,
        quorum_size=2,
        ensemble_size=2,
        ack_quorum_size=2,
        length=3000,
        last_entry_id=99,
        state="CLOSED",
        digest_type="CRC32C",
        ctime=1234,
        ctoken=7,
        ensembles=[(0, ["bookie-0:3181", "bookie-1:3181"])],
        custom_metadata={
            "application": b"pulsar",
            "component": b"managed-ledger",
            "pulsar/managed-ledger": ML_NAME.encode(),
        },
        password=b"",
    )
    assert md.custom("pulsar/managed-ledger") == ML_NAME
    assert md.custom("pulsar/cursor") is None
    assert md.bookies == {"bookie-0:3181", "bookie-1:3181"}


def test_v3_random_ctoken_is_positive():
    md = parse_ledger_metadata(build_pulsar_ledger_metadata({}))
    assert md.ctoken is not None and md.ctoken > 0


def test_v2_hand_written_text():
    md = parse_ledger_metadata(V2_TEXT)
    assert md.format_version == 2
    assert (md.quorum_size, md.ensemble_size, md.ack_quorum_size) == (2, 3, 2)
    assert (md.length, md.last_entry_id, md.state) == (4096, 41, "CLOSED")
    assert md.digest_type == "CRC32C"
    assert md.ctime == 1700000000000
    assert md.ctoken is None
    assert md.ensembles == [
        (0, ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"]),
        (20, ["10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"]),
    ]
    assert md.custom("application") == "pulsar"
    assert md.custom("component") == "managed-ledger"
    assert md.custom("pulsar/managed-ledger") == ML_NAME
    assert md.custom_metadata["binary"] == b"\xff\x00"
    assert md.custom("binary") is None  # not UTF-8


def test_v2_minimal_and_defaults():
    md = parse_ledger_metadata(
        b"BookieMetadataFormatVersion\t2\nquorumSize: 3\nensembleSize: 3\nlength: 0\nstate: OPEN\n"
    )
    assert md.ack_quorum_size == 3  # absent: BookKeeper falls back to the write quorum
    assert md.last_entry_id == -1
    assert md.state == "OPEN"
    assert md.digest_type is None and md.password is None and md.ctime is None
    assert md.custom_metadata == {} and md.ensembles == []


def test_v1_text():
    md = parse_ledger_metadata(V1_TEXT)
    assert md.format_version == 1
    assert (md.quorum_size, md.ensemble_size, md.ack_quorum_size, md.length) == (2, 3, 2, 512)
    assert (md.state, md.last_entry_id) == ("CLOSED", 9)
    assert md.ensembles == [
        (0, ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"]),
        (7, ["10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"]),
    ]
    assert md.custom_metadata == {}


def test_v1_open_and_in_recovery():
    base = b"BookieMetadataFormatVersion\t1\n2\n2\n0\n0\ta:1\tb:1\n"
    assert parse_ledger_metadata(base).state == "OPEN"
    recovering = parse_ledger_metadata(base + b"-102\tCLOSED")
    assert (recovering.state, recovering.last_entry_id) == ("IN_RECOVERY", -1)


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("state", ["OPEN", "IN_RECOVERY", "CLOSED"])
def test_round_trip(version, state):
    md = LedgerMetadata(
        format_version=version,
        quorum_size=3,
        ensemble_size=5,
        ack_quorum_size=2,
        length=123456789012,
        last_entry_id=-1 if state == "OPEN" else 777,
        state=state,
        digest_type="HMAC",
        ctime=1_700_000_000_123,
        ctoken=2**62 + 5 if version == 3 else None,
        ensembles=[(0, ["a:3181", "b:3181"]), (500, ["a:3181", "c:3181"])],
        custom_metadata={"application": b"pulsar", "ünï": "cödé".encode(), "bin": bytes(range(256))},
        password=b"secret\x00\xff",
    )
    data = serialize_ledger_metadata(md, version)
    assert data.startswith(header(version))
    assert parse_ledger_metadata(data) == md


def test_v2_never_writes_ctoken():
    md = parse_ledger_metadata(build_pulsar_ledger_metadata({}, ctoken=99))
    assert md.ctoken == 99
    v2 = serialize_ledger_metadata(md, 2)
    assert b"cToken" not in v2
    assert parse_ledger_metadata(v2).ctoken is None
    assert parse_ledger_metadata(build_pulsar_ledger_metadata({}, format_version=2, ctoken=99)).ctoken is None


def test_v2_output_is_ascii_text():
    data = build_pulsar_ledger_metadata({"k": "é"}, format_version=2)
    data.decode("ascii")  # non-ASCII escaped as octal, like protobuf-java
    assert b'value: "\\303\\251"' in data


def test_custom_metadata_helpers():
    assert cursor_custom_metadata(ML_NAME, "sub") == {
        "application": "pulsar",
        "component": "managed-ledger",
        "pulsar/managed-ledger": ML_NAME,
        "pulsar/cursor": "sub",
    }
    assert schema_custom_metadata("public/default/orders") == {
        "application": "pulsar",
        "component": "schema",
        "pulsar/schemaId": "public/default/orders",
    }


def test_serialize_rejects():
    md = parse_ledger_metadata(build_pulsar_ledger_metadata({}))
    with pytest.raises(ValueError):
        serialize_ledger_metadata(md, 1)
    with pytest.raises(ValueError):
        serialize_ledger_metadata(LedgerMetadata(3, 1, 1, 1, 0, -1, "OPEN", digest_type="MD5"))
    with pytest.raises(ValueError):
        serialize_ledger_metadata(LedgerMetadata(3, 1, 1, 1, 0, -1, "BROKEN"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        build_pulsar_ledger_metadata({}, bookies=())


VALID_V3 = build_pulsar_ledger_metadata({"application": "pulsar"}, ctoken=1)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        b"BookieMetadataFormatVersion",  # no tab
        b"BookieMetadataFormatVersion\t",  # no version
        b"BookieMetadataFormatVersion\t3",  # no newline
        b"BookieMetadataFormatVersion\t\n",
        b"BookieMetadataFormatVersion\tx\n",
        b"BookieMetadataFormatVersion\t-1\n",
        b"BookieMetadataFormatVersion\t12345678901\n",  # more than 10 digits
        b"BookieMetadataFormatVersion\t4\n",
        b"BookieMetadataFormatVersion\t0\n",
        b"bookiemetadataformatversion\t3\n",
        V3_HEADER,  # header only
        V3_HEADER + b"\x05\x08\x01",  # length says 5, 2 present
        VALID_V3[:-1],  # truncated
        VALID_V3 + b"\x00",  # trailing byte
        V3_HEADER + b"\xff\xff\xff\xff\xff\xff",  # varint too long
        V3_HEADER + b"\x80",  # varint truncated
        V3_HEADER + b"\x02\xff\xff",  # body not protobuf
        V3_HEADER + b"\x02\x08\x01",  # lacks ensembleSize, length, state
        V3_HEADER + b"\x08\x08\x01\x10\x01\x18\x00\x28\x09",  # state 9 is not a State
        b"BookieMetadataFormatVersion\t2\nquorumSize: 2\n",  # missing required fields
        b"BookieMetadataFormatVersion\t2\nnot text format",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 1\nensembleSize: 1\nlength: 0\nstate: SHUT\n",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 1\nensembleSize: 1\nlength: 0\nstate: OPEN\nbogus: 1\n",
        b"BookieMetadataFormatVersion\t2\n\xff\xfe",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 1\nensembleSize: 1\nlength: 0\nstate: OPEN\n"
        b'segment {\n  ensembleMember: "a"\n}\n',  # segment lacks firstEntryId
        b"BookieMetadataFormatVersion\t1\n2\n",  # v1 truncated
        b"BookieMetadataFormatVersion\t1\nx\n2\n0\n",
        b"BookieMetadataFormatVersion\t1\n2\n2\n0\nnotab\n",
        b"BookieMetadataFormatVersion\t1\n2\n2\n0\nx\tCLOSED",
    ],
)
def test_bad_bytes_are_metadata_format_error(data):
    with pytest.raises(MetadataFormatError):
        parse_ledger_metadata(data)


def test_every_truncation_of_v3_fails_cleanly():
    for cut in range(len(VALID_V3)):
        with pytest.raises(MetadataFormatError):
            parse_ledger_metadata(VALID_V3[:cut])


@given(st.binary(max_size=120))
def test_arbitrary_bodies_never_escape_as_other_errors(body):
    for version in (1, 2, 3):
        with contextlib.suppress(MetadataFormatError):
            parse_ledger_metadata(header(version) + body)
