"""BookKeeper ledger metadata: the bytes of a ledger znode, as ``LedgerMetadataSerDe`` reads and writes them.

Every version starts with the header ``BookieMetadataFormatVersion<TAB><n><LF>``; the body depends on ``n``:

* 1 (BK 4.0): plain text lines, no custom metadata;
* 2 (BK 4.2, default writer until BK 4.9): ``LedgerMetadataFormat`` in protobuf TextFormat;
* 3 (BK 4.9+, default writer since 4.10): ``LedgerMetadataFormat`` binary, preceded by its varint32 length.

Old clusters hold a mix, so all three are read. Pulsar's tags (``application``, ``component``,
``pulsar/managed-ledger``, ...) live in ``customMetadata``, which is why this parser exists: the service must
never delete a ledger whose tags do not say it belongs to the topic being cleaned up.

Bytes that do not parse raise :class:`~ledger_deletion.errors.MetadataFormatError`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast, get_args

from google.protobuf import text_format
from google.protobuf.message import DecodeError, EncodeError

from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.proto.DataFormats_pb2 import LedgerMetadataFormat

__all__ = [
    "CUSTOM_APPLICATION",
    "CUSTOM_COMPACTED_TO",
    "CUSTOM_COMPACTED_TOPIC",
    "CUSTOM_COMPONENT",
    "CUSTOM_CURSOR",
    "CUSTOM_MANAGED_LEDGER",
    "CUSTOM_SCHEMA_ID",
    "HEADER_PREFIX",
    "LedgerMetadata",
    "LedgerState",
    "build_pulsar_ledger_metadata",
    "cursor_custom_metadata",
    "header",
    "managed_ledger_custom_metadata",
    "parse_ledger_metadata",
    "schema_custom_metadata",
    "serialize_ledger_metadata",
]

LedgerState = Literal["OPEN", "IN_RECOVERY", "CLOSED"]
_STATES: Final = frozenset(get_args(LedgerState))
_DIGEST_TYPES: Final[dict[str, LedgerMetadataFormat.DigestType]] = {
    "CRC32": LedgerMetadataFormat.CRC32,
    "HMAC": LedgerMetadataFormat.HMAC,
    "CRC32C": LedgerMetadataFormat.CRC32C,
    "DUMMY": LedgerMetadataFormat.DUMMY,
}

HEADER_PREFIX: Final = b"BookieMetadataFormatVersion\t"
_MAX_VERSION_DIGITS: Final = 10  # LedgerMetadataSerDe.MAX_VERSION_DIGITS
_V1_CLOSED_TAG: Final = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID: Final = -102  # v1 wrote "-102<TAB>CLOSED" for a ledger in recovery

# Custom-metadata keys Pulsar writes (managed-ledger LedgerMetadataUtils); values are UTF-8 bytes.
CUSTOM_APPLICATION: Final = "application"  # "pulsar"
CUSTOM_COMPONENT: Final = "component"  # "managed-ledger" | "compacted-ledger" | "schema"
CUSTOM_MANAGED_LEDGER: Final = "pulsar/managed-ledger"  # the managed-ledger name (data and cursor ledgers)
CUSTOM_CURSOR: Final = "pulsar/cursor"  # the cursor name (cursor ledgers only)
CUSTOM_SCHEMA_ID: Final = "pulsar/schemaId"
CUSTOM_COMPACTED_TOPIC: Final = "pulsar/compactedTopic"
CUSTOM_COMPACTED_TO: Final = "pulsar/compactedTo"


@dataclass(frozen=True)
class LedgerMetadata:
    """What a ledger znode says, in the same terms for every format version.

    ``ack_quorum_size`` is the write quorum when the record has none (v1, or v2 from before the field), as
    BookKeeper reads it. ``last_entry_id`` is -1 when the record does not carry one. ``ctime`` and ``ctoken``
    are ``None`` when absent (BookKeeper then uses the znode's ctime; we leave that to the caller, who has the
    ZooKeeper stat).
    """

    format_version: int
    quorum_size: int
    ensemble_size: int
    ack_quorum_size: int
    length: int
    last_entry_id: int
    state: LedgerState
    digest_type: str | None = None
    ctime: int | None = None
    ctoken: int | None = None
    ensembles: list[tuple[int, list[str]]] = field(default_factory=list)
    custom_metadata: dict[str, bytes] = field(default_factory=dict)
    password: bytes | None = None

    def custom(self, key: str) -> str | None:
        """A custom-metadata value as text; ``None`` when absent or not valid UTF-8 (Pulsar writes UTF-8)."""
        value = self.custom_metadata.get(key)
        if value is None:
            return None
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None

    @property
    def bookies(self) -> set[str]:
        """Every bookie that ever held part of the ledger (the union of all ensembles)."""
        return {bookie for _, members in self.ensembles for bookie in members}


# ---------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------


def parse_ledger_metadata(data: bytes) -> LedgerMetadata:
    """Decode the content of a ledger znode (any format version BookKeeper has written).

    Raises:
        MetadataFormatError: a missing or corrupt header, an unknown version, or a body that does not parse.
    """
    data = bytes(data)
    version, offset = _read_header(data)
    body = data[offset:]
    if version == 3:
        return _from_proto(_parse_v3(body), 3)
    if version == 2:
        return _from_proto(_parse_v2(body), 2)
    if version == 1:
        return _parse_v1(body)
    raise MetadataFormatError(f"ledger metadata format version {version} is not one of 1, 2, 3")


def _read_header(data: bytes) -> tuple[int, int]:
    if not data.startswith(HEADER_PREFIX):
        raise MetadataFormatError(
            f"not BookKeeper ledger metadata: expected header {HEADER_PREFIX!r}, got {data[:32]!r}"
        )
    start = len(HEADER_PREFIX)
    end = data.find(b"\n", start, start + _MAX_VERSION_DIGITS + 1)
    if end < 0:
        raise MetadataFormatError(
            "ledger metadata header has no end of version number (corrupt or truncated)"
        )
    digits = data[start:end]
    if not digits or not digits.isdigit():
        raise MetadataFormatError(f"ledger metadata header has a bad version number {digits!r}")
    return int(digits), end + 1


def _parse_v3(body: bytes) -> LedgerMetadataFormat:
    size, offset = _read_varint32(body)
    if len(body) - offset != size:
        what = "truncated" if len(body) - offset < size else "followed by trailing bytes"
        raise MetadataFormatError(
            f"v3 ledger metadata is {what}: length prefix says {size} bytes, {len(body) - offset} present"
        )
    msg = LedgerMetadataFormat()
    try:
        msg.ParseFromString(body[offset:])
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MetadataFormatError(f"v3 ledger metadata body is not a LedgerMetadataFormat: {exc}") from exc
    _check_required(msg, "v3")
    return msg


def _parse_v2(body: bytes) -> LedgerMetadataFormat:
    msg = LedgerMetadataFormat()
    try:
        text_format.Parse(body.decode("utf-8"), msg)
    except (UnicodeDecodeError, text_format.ParseError, ValueError) as exc:
        raise MetadataFormatError(f"v2 ledger metadata is not LedgerMetadataFormat text: {exc}") from exc
    _check_required(msg, "v2")
    return msg


def _check_required(msg: LedgerMetadataFormat, version: str) -> None:
    """Enforce proto2 ``required`` as BookKeeper's parser does; the Python runtime does not on parse."""
    if msg.IsInitialized():
        return
    missing = [f.name for f in msg.DESCRIPTOR.fields if f.is_required and not msg.HasField(f.name)]
    if any(not seg.HasField("firstEntryId") for seg in msg.segment):
        missing.append("segment.firstEntryId")
    raise MetadataFormatError(f"{version} ledger metadata lacks required field(s): {', '.join(missing)}")


def _read_varint32(data: bytes) -> tuple[int, int]:
    """A protobuf varint32 (at most 5 bytes), as ``parseDelimitedFrom`` reads the length prefix."""
    value = 0
    for i, byte in enumerate(data[:5]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value > 0x7FFFFFFF:
                raise MetadataFormatError(f"v3 ledger metadata length prefix {value} is out of range")
            return value, i + 1
    raise MetadataFormatError("v3 ledger metadata length prefix is truncated or longer than 5 bytes")


def _from_proto(msg: LedgerMetadataFormat, version: int) -> LedgerMetadata:
    return LedgerMetadata(
        format_version=version,
        quorum_size=msg.quorumSize,
        ensemble_size=msg.ensembleSize,
        ack_quorum_size=msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize,
        length=msg.length,
        last_entry_id=msg.lastEntryId if msg.HasField("lastEntryId") else -1,
        state=cast(LedgerState, LedgerMetadataFormat.State.Name(msg.state)),
        digest_type=LedgerMetadataFormat.DigestType.Name(msg.digestType)
        if msg.HasField("digestType")
        else None,
        ctime=msg.ctime if msg.HasField("ctime") else None,
        ctoken=msg.cToken if msg.HasField("cToken") else None,
        ensembles=[(seg.firstEntryId, list(seg.ensembleMember)) for seg in msg.segment],
        # Later duplicates win, as in BookKeeper's HashMap.put loop.
        custom_metadata={entry.key: entry.value for entry in msg.customMetadata},
        password=msg.password if msg.HasField("password") else None,
    )


def _parse_v1(body: bytes) -> LedgerMetadata:
    try:
        lines = body.decode("utf-8").splitlines()
        quorum, ensemble_size, length = int(lines[0]), int(lines[1]), int(lines[2])
        state: LedgerState = "OPEN"
        last_entry_id = -1
        ensembles: list[tuple[int, list[str]]] = []
        for line in lines[3:]:
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise ValueError(f"line {line[:60]!r} has no tab-separated fields")
            if parts[1] == _V1_CLOSED_TAG:  # the close line ends the record
                entry_id = int(parts[0])
                if entry_id == _V1_IN_RECOVERY_ENTRY_ID:
                    state = "IN_RECOVERY"
                else:
                    state, last_entry_id = "CLOSED", entry_id
                break
            ensembles.append((int(parts[0]), parts[1:]))
    except (UnicodeDecodeError, IndexError, ValueError) as exc:
        raise MetadataFormatError(f"v1 ledger metadata does not parse: {exc}") from exc
    return LedgerMetadata(
        format_version=1,
        quorum_size=quorum,
        ensemble_size=ensemble_size,
        ack_quorum_size=quorum,
        length=length,
        last_entry_id=last_entry_id,
        state=state,
        ensembles=ensembles,
    )


# ---------------------------------------------------------------------------------------------------------
# Writing (v2 and v3: what tests and the simulated cluster need to create realistic ledger znodes)
# ---------------------------------------------------------------------------------------------------------


def header(version: int) -> bytes:
    """``BookieMetadataFormatVersion<TAB><version><LF>``."""
    return HEADER_PREFIX + str(version).encode("ascii") + b"\n"


def serialize_ledger_metadata(md: LedgerMetadata, format_version: int = 3) -> bytes:
    """Encode like ``LedgerMetadataSerDe.serialize`` for format version 2 (TextFormat) or 3 (binary).

    Version 2 never carries ``cToken`` (BookKeeper's v2 writer leaves it out); ``md.format_version`` is
    ignored in favour of ``format_version`` so one value can be written in either form.

    Raises:
        ValueError: an unsupported version, an unknown state or digest type, or a record protobuf rejects.
    """
    if format_version not in (2, 3):
        raise ValueError(f"can only write ledger metadata format version 2 or 3, not {format_version}")
    msg = _to_proto(md, include_ctoken=format_version == 3)
    try:
        if format_version == 3:
            body = msg.SerializeToString()
            return header(3) + _varint(len(body)) + body
        # as_utf8=False escapes non-ASCII bytes as octal, like protobuf-java's TextFormat printer.
        return header(2) + text_format.MessageToString(msg, as_utf8=False).encode("utf-8")
    except EncodeError as exc:
        raise ValueError(f"ledger metadata is incomplete: {exc}") from exc


def _to_proto(md: LedgerMetadata, *, include_ctoken: bool) -> LedgerMetadataFormat:
    if md.state not in _STATES:
        raise ValueError(f"unknown ledger state {md.state!r}")
    msg = LedgerMetadataFormat(
        quorumSize=md.quorum_size,
        ackQuorumSize=md.ack_quorum_size,
        ensembleSize=md.ensemble_size,
        length=md.length,
        lastEntryId=md.last_entry_id,
        state=md.state,
    )
    if md.ctime is not None:
        msg.ctime = md.ctime
    if md.digest_type is not None:
        try:
            msg.digestType = _DIGEST_TYPES[md.digest_type]
        except KeyError:
            raise ValueError(f"unknown digest type {md.digest_type!r}") from None
    if md.password is not None:
        msg.password = md.password
    for key, value in md.custom_metadata.items():
        msg.customMetadata.add(key=key, value=value)
    for first_entry_id, members in md.ensembles:
        msg.segment.add(firstEntryId=first_entry_id, ensembleMember=members)
    if include_ctoken and md.ctoken is not None:
        msg.cToken = md.ctoken
    return msg


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def managed_ledger_custom_metadata(ml_name: str) -> dict[str, str]:
    """Tags of a topic-data ledger (``LedgerMetadataUtils.buildBaseManagedLedgerMetadata``)."""
    return {CUSTOM_APPLICATION: "pulsar", CUSTOM_COMPONENT: "managed-ledger", CUSTOM_MANAGED_LEDGER: ml_name}


def cursor_custom_metadata(ml_name: str, cursor_name: str) -> dict[str, str]:
    """Tags of a cursor ledger: the managed-ledger tags plus ``pulsar/cursor``."""
    return {**managed_ledger_custom_metadata(ml_name), CUSTOM_CURSOR: cursor_name}


def schema_custom_metadata(schema_id: str) -> dict[str, str]:
    """Tags of a schema ledger (``LedgerMetadataUtils.buildMetadataForSchema``)."""
    return {CUSTOM_APPLICATION: "pulsar", CUSTOM_COMPONENT: "schema", CUSTOM_SCHEMA_ID: schema_id}


def build_pulsar_ledger_metadata(
    custom: Mapping[str, str],
    *,
    format_version: int = 3,
    state: LedgerState = "CLOSED",
    length: int = 0,
    last_entry_id: int = -1,
    bookies: Sequence[str] = ("bookie-0:3181", "bookie-1:3181"),
    write_quorum: int | None = None,
    ack_quorum: int | None = None,
    digest_type: str = "CRC32C",
    ctime: int | None = None,
    ctoken: int | None = None,
) -> bytes:
    """Ledger znode bytes as a Pulsar broker would leave them (for tests and the simulated cluster).

    Defaults follow Pulsar's managed ledger: CRC32C digest, empty password, one ensemble starting at entry 0,
    write/ack quorum = ensemble size. With version 3 a random positive ``cToken`` is written unless one is
    given (BookKeeper always writes one); ``ctime`` only when given, as
    ``storeSystemTimeAsLedgerCreationTime`` is off by default. The defaults describe an empty closed ledger
    (``last_entry_id=-1``, ``length=0``), the kind a broker leaves behind after a rollover with no traffic.
    """
    if not bookies:
        raise ValueError("a ledger needs at least one bookie")
    md = LedgerMetadata(
        format_version=format_version,
        quorum_size=write_quorum if write_quorum is not None else len(bookies),
        ensemble_size=len(bookies),
        ack_quorum_size=ack_quorum if ack_quorum is not None else (write_quorum or len(bookies)),
        length=length,
        last_entry_id=last_entry_id,
        state=state,
        digest_type=digest_type,
        ctime=ctime,
        ctoken=ctoken if ctoken is not None else secrets.randbits(62) + 1,
        ensembles=[(0, list(bookies))],
        custom_metadata={key: value.encode("utf-8") for key, value in custom.items()},
        password=b"",
    )
    return serialize_ledger_metadata(md, format_version)
