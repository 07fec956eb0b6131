"""A deterministic corpus of malformed and hostile deletion-request payloads (≥ 10,000).

Generated in code from a fixed seed, so CI sends exactly the same bytes every time and a failure names a
payload that can be reproduced with ``corpus()[index]``. Categories: truncated Avro, flipped
bytes, wrong types (other writer schemas), huge strings, negative / zero ids, unknown enum symbols, absurd
offload contexts, non-UTF-8 names, path-traversal-like names, random bytes, trailing bytes, oversized.

Most payloads cannot decode into a valid request: they must each land in the dead-letter topic with a
reason. A few do decode (a mutation that happens to stay valid, ledger id 0, a non-S3 offload driver);
those must delete nothing. They are capped (:data:`MAX_VALID`) because each one costs a workflow, and
they all name topics of the ``fuzz`` tenant, which owns no ledger, so their BookKeeper metadata check
can never match.
"""

from __future__ import annotations

import io
import json
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import fastavro

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.avro import decode_request, encode_record, schema_json

SEED = 186  # PIP-186
TARGET = 10_500
MAX_VALID = 25  # decodable by accident (mutations); the intended ones come on top


@dataclass(frozen=True)
class Payload:
    category: str
    data: bytes
    valid: bool  # decodes into a valid request (must then delete nothing, instead of being dead-lettered)


def _zigzag(value: int) -> bytes:
    """Avro long: zig-zag varint."""
    n = (value << 1) ^ (value >> 63)
    n &= 2**64 - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _avro_string(raw: bytes) -> bytes:
    return _zigzag(len(raw)) + raw


def _record(rng: random.Random, **changes: Any) -> dict[str, Any]:
    """A plausible wire record under the ``fuzz`` tenant (no ledger of this tenant exists anywhere)."""
    ledger_id = rng.randrange(1, 2**40)
    record: dict[str, Any] = {
        "topicName": f"fuzz/ns{rng.randrange(10)}/topic-{rng.randrange(1000)}",
        "ledgerComponent": rng.choice(["MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE"]),
        "ledgerType": "LEDGER",
        "ledgerId": ledger_id,
        "cursorName": "sub",
        "schemaId": "fuzz/ns/schema",
        "context": None,
        "checkLedgerStillInUse": rng.random() < 0.5,
        "properties": {"origin": "fuzz"},
    }
    if rng.random() < 0.4:
        record["ledgerType"] = "OFFLOAD_LEDGER"
        record["context"] = {
            "ledgerId": ledger_id,
            "entries": rng.randrange(1000),
            "size": rng.randrange(10**6),
            "timestamp": 1_700_000_000_000,
            "offloadContext": {
                "uidMsb": rng.randrange(1, 2**63),
                "uidLsb": rng.randrange(1, 2**63),
                "complete": True,
                "bookkeeperDeleted": False,
                "timestamp": 1_700_000_000_000,
                "driverMetadata": {"name": "aws-s3", "properties": {"bucket": "fuzz-no-such-bucket"}},
                "offloadSegment": [],
            },
        }
    record.update(changes)
    return record


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_json())
    return loaded


def _retyped_schema(field: str, avro_type: Any) -> dict[str, Any]:
    """Our schema with one top-level field's type replaced: a producer with the wrong types."""
    schema: dict[str, Any] = json.loads(json.dumps(_schema()))
    for item in schema["fields"]:
        if item["name"] == field:
            item["type"] = avro_type
            item.pop("default", None)
    return schema


def _encode(record: dict[str, Any], schema: dict[str, Any] | None = None) -> bytes:
    if schema is None:
        return encode_record(record)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return buffer.getvalue()


def _valid_bases(rng: random.Random, count: int) -> list[bytes]:
    return [_encode(_record(rng)) for _ in range(count)]


def _raw_prefix(topic: bytes, component: int = 0, ledger_type: int = 0) -> bytes:
    """The first fields written by hand, for byte sequences no Avro writer would produce."""
    return _avro_string(topic) + _zigzag(component) + _zigzag(ledger_type)


def _tail(ledger_id: int = 12345) -> bytes:
    # ledgerId, cursorName null, schemaId null, context null, checkLedgerStillInUse true, properties {}
    return _zigzag(ledger_id) + b"\x00" + b"\x00" + b"\x00" + b"\x01" + b"\x00"


def _generate(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    bases = _valid_bases(rng, 24)

    # 1. truncated Avro: every proper prefix of valid encodings (a prefix can never be a whole record).
    for base in bases:
        for cut in range(len(base)):
            yield "truncated", base[:cut]

    # 2. flipped bytes / bits inside valid encodings.
    for _ in range(2200):
        mutable = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(mutable))
            if rng.random() < 0.5:
                mutable[position] ^= 1 << rng.randrange(8)
            else:
                mutable[position] = rng.randrange(256)
        yield "flipped", bytes(mutable)

    # 3. wrong types: a producer whose schema has other types for our fields.
    retypes: list[tuple[str, Any, Any]] = [
        ("ledgerId", "string", lambda: str(rng.randrange(10**6))),
        ("ledgerId", "double", lambda: rng.random() * 1e6),
        ("ledgerId", "boolean", lambda: True),
        ("topicName", "long", lambda: rng.randrange(-(2**40), 2**40)),
        ("topicName", "bytes", lambda: rng.randbytes(rng.randrange(1, 40))),
        ("ledgerComponent", "string", lambda: rng.choice(["MANAGED_LEDGER", "LEDGER", "x"])),
        ("ledgerType", "int", lambda: rng.randrange(-5, 50)),
        ("checkLedgerStillInUse", "string", lambda: "false"),
        ("properties", {"type": "array", "items": "long"}, lambda: [rng.randrange(100) for _ in range(3)]),
        ("context", "string", lambda: '{"ledgerId": 1}'),
        ("cursorName", "long", lambda: rng.randrange(10**9)),
    ]
    for index in range(1100):
        field, avro_type, value = retypes[index % len(retypes)]
        record = _record(rng)
        record[field] = value()
        yield "wrong-type", _encode(record, _retyped_schema(field, avro_type))

    # 4. huge strings (names are capped at 1024 characters; payloads at 1 MiB).
    for index in range(240):
        size = rng.choice([1025, 2048, 10_000, 65_536, 200_000])
        blob = "a" * size
        field = ("topicName", "cursorName", "schemaId", "properties")[index % 4]
        if field == "topicName":
            record = _record(rng, topicName=f"fuzz/ns/{blob}")
        elif field == "properties":
            record = _record(rng, properties={"k": blob})
        else:
            record = _record(rng, ledgerComponent="MANAGED_CURSOR", **{field: blob})
            if field == "schemaId":
                record.update(ledgerComponent="SCHEMA_STORAGE", schemaId=f"fuzz/ns/{blob}")
        yield "huge-string", _encode(record)
    yield (
        "oversized",
        _encode(_record(rng, properties={f"k{i}": "v" * 1000 for i in range(60)})) + b"\x00" * (1024 * 1024),
    )

    # 5. negative (and zero) ids, at the top level and inside the context.
    for _ in range(600):
        ledger_id = rng.choice([-1, -2, -(2**63), -rng.randrange(1, 2**62)])
        if rng.random() < 0.5:
            yield "negative-id", _encode(_record(rng, ledgerId=ledger_id))
        else:
            record = _record(rng, ledgerType="OFFLOAD_LEDGER")
            record["context"] = {"ledgerId": ledger_id, "offloadContext": None}
            yield "negative-id", _encode(record)
    for _ in range(5):  # ledger 0 is a legal BookKeeper id: these decode, and must delete nothing
        yield "zero-id", _encode(_record(rng, ledgerId=0, ledgerType="LEDGER", context=None))

    # 6. unknown enum symbols: indexes past the symbol lists.
    for _ in range(700):
        topic = f"fuzz/ns/t{rng.randrange(100)}".encode()
        if rng.random() < 0.5:
            data = _raw_prefix(topic, component=rng.choice([3, 4, 100, 2**31, -1]), ledger_type=0)
        else:
            data = _raw_prefix(topic, component=0, ledger_type=rng.choice([2, 3, 77, 2**40, -3]))
        yield "unknown-enum", data + _tail()

    # 7. absurd offload contexts.
    def offload(**ctx_changes: Any) -> dict[str, Any]:
        record = _record(rng, ledgerType="OFFLOAD_LEDGER")
        base_ctx: dict[str, Any] = {
            "ledgerId": record["ledgerId"],
            "offloadContext": {
                "uidMsb": 0,
                "uidLsb": 0,
                "complete": True,
                "bookkeeperDeleted": False,
                "timestamp": 0,
                "driverMetadata": {"name": "aws-s3", "properties": {}},
                "offloadSegment": [],
            },
        }
        base_ctx["offloadContext"].update(ctx_changes)
        record["context"] = base_ctx
        return record

    absurd: list[Any] = [
        lambda: _record(rng, ledgerType="OFFLOAD_LEDGER", context=None),
        lambda: _record(rng, ledgerType="OFFLOAD_LEDGER", context={"ledgerId": 1, "offloadContext": None}),
        lambda: offload(),  # no uid, no segments: no key derivable
        lambda: offload(offloadSegment=[{"uidMsb": 0, "uidLsb": 0}] * rng.randint(1, 5)),
        lambda: offload(uidMsb=1, offloadSegment=[{"uidMsb": 1, "uidLsb": 1}] * 1025),
        lambda: offload(uidMsb=1, driverMetadata={"name": "", "properties": {}}),
        lambda: offload(uidMsb=1, driverMetadata={"name": "x" * 65, "properties": {}}),
        lambda: offload(
            uidMsb=1, driverMetadata={"name": "s3", "properties": {f"p{i}": "v" for i in range(65)}}
        ),
        lambda: {**offload(uidMsb=1), "ledgerId": 5, "context": {"ledgerId": 6, "offloadContext": None}},
    ]
    for index in range(900):
        record = absurd[index % len(absurd)]()
        if "context" in record and isinstance(record["context"], dict):
            record["context"].setdefault("offloadContext", None)
        yield "absurd-offload", _encode(record)
    for _ in range(5):  # decodes, but the driver is not S3: the workflow dead-letters it (never deletes)
        yield (
            "foreign-driver",
            _encode(
                offload(uidMsb=7, uidLsb=7, driverMetadata={"name": "google-cloud-storage", "properties": {}})
            ),
        )

    # 8. non-UTF-8 names (Avro strings must be UTF-8).
    invalid_utf8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xe2\x28\xa1"]
    for index in range(700):
        bad = invalid_utf8[index % len(invalid_utf8)]
        topic = b"fuzz/ns/" + bad + rng.randbytes(rng.randrange(0, 4)).replace(b"/", b"_")
        yield "non-utf8", _raw_prefix(topic) + _tail()

    # 9. path-traversal-like and otherwise illegal names.
    names = [
        "../../ledgers/00/0000/L0001",
        "fuzz/ns/../../x",
        "fuzz/../ns/t",
        "/ledgers/00/0000",
        "fuzz/ns/t/extra/parts",
        "fuzz/ns",
        "fuzz//t",
        "fuzz/ns/.",
        "fuzz/ns/..",
        "fuzz/ns/t\n",
        "fuzz/ns/t\x00x",
        "fuzz/ns/t x",
        "fuzz/ns/t?x=1",
        "fuzz/ns/t#frag",
        "fuzz/ns/ⅼedger",
        "persistent://fuzz/ns/t",
        "",
        "fuzz\\ns\\t",
    ]
    for index in range(900):
        name = names[index % len(names)]
        which = index % 3
        if which == 0:
            yield "path-traversal", _encode(_record(rng, topicName=name))
        elif which == 1:
            yield (
                "path-traversal",
                _encode(_record(rng, ledgerComponent="MANAGED_CURSOR", cursorName=name + "/x")),
            )
        else:
            yield (
                "path-traversal",
                _encode(_record(rng, ledgerComponent="SCHEMA_STORAGE", schemaId=name or "../x")),
            )

    # 10. random bytes; 11. a valid record followed by trailing bytes; 12. nothing at all.
    for _ in range(1100):
        yield "random", rng.randbytes(rng.choice([1, 2, 3, 8, 16, 64, 256, 1024]))
    for _ in range(400):
        yield "trailing", rng.choice(bases) + rng.randbytes(rng.randint(1, 32))
    yield "empty", b""
    yield "float-bits", struct.pack(">d", 1.0) * 4


INTENDED_VALID = frozenset({"zero-id", "foreign-driver"})


def _decoded_tenant(data: bytes) -> str | None:
    try:
        return decode_request(data).tenant
    except InvalidRequestError:
        return None


@cache
def corpus() -> tuple[Payload, ...]:
    """The corpus: ≥ 10,000 payloads, the same on every run, at most :data:`MAX_VALID` decodable ones."""
    rng = random.Random(SEED)
    out: list[Payload] = []
    accidental = 0
    for category, data in _generate(rng):
        tenant = _decoded_tenant(data)
        if tenant is not None:
            if tenant != "fuzz":
                continue  # a mutation renamed the tenant: it could name another test's topic, skip it
            if category not in INTENDED_VALID:
                if accidental >= MAX_VALID:
                    continue  # a mutation that stayed valid: one more workflow would teach nothing new
                accidental += 1
        out.append(Payload(category, data, tenant is not None))
    while len(out) < 10_000:  # top up with random bytes (never valid: no record starts that short)
        out.append(Payload("random", rng.randbytes(rng.randint(1, 3)), False))
    return tuple(out)


if __name__ == "__main__":
    from collections import Counter

    items = corpus()
    print(len(items), "payloads,", sum(p.valid for p in items), "decodable")
    for category, count in sorted(Counter(p.category for p in items).items()):
        print(f"  {category:16} {count}")
