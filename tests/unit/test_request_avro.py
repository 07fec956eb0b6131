"""The request model and its Avro encoding: exact bytes, schema resolution, and rejection of bad input."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.avro import decode_request, encode_record, encode_request, schema_json
from ledger_deletion.formats.offload_keys import offload_uuid
from ledger_deletion.request import (
    LedgerComponent,
    LedgerType,
    PendingDeleteLedgerInfo,
    request_from_wire,
    request_to_wire,
)

OFFLOADED = {
    "topicName": "public/default/orders-partition-1",
    "ledgerComponent": "MANAGED_LEDGER",
    "ledgerType": "OFFLOAD_LEDGER",
    "ledgerId": 12,
    "cursorName": None,
    "schemaId": None,
    "checkLedgerStillInUse": True,
    "properties": {"origin": "test"},
    "context": {
        "ledgerId": 12,
        "offloadContext": {
            "uidMsb": 4551604436496895521,
            "uidLsb": -6502338462329705636,
            "complete": True,
            "driverMetadata": {"name": "aws-s3", "properties": {"bucket": "offload"}},
            "offloadSegment": [],
        },
    },
}


def simple(ledger_id: int = 5) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        topic_name="t/n/x",
        ledger_component=LedgerComponent.MANAGED_LEDGER,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id,
        check_ledger_still_in_use=True,
    )


def test_known_bytes_of_a_minimal_request() -> None:
    # Avro binary: string = zigzag length + bytes; enum = zigzag index; long = zigzag varint;
    # union = zigzag branch index; boolean = one byte; map = block count ... 0.
    expected = (
        b"\x0at/n/x"  # topicName, length 5
        b"\x00"  # ledgerComponent MANAGED_LEDGER (index 0)
        b"\x00"  # ledgerType LEDGER (index 0)
        b"\x0a"  # ledgerId 5
        b"\x00"  # cursorName: null branch
        b"\x00"  # schemaId: null branch
        b"\x00"  # context: null branch
        b"\x01"  # checkLedgerStillInUse true
        b"\x00"  # properties: empty map
    )
    assert encode_request(simple()) == expected
    assert decode_request(expected) == simple()


def test_offloaded_request_round_trips_through_avro_and_json() -> None:
    request = request_from_wire(OFFLOADED)
    assert request.context is not None and request.context.offload_context is not None
    assert request.context.offload_context.uid_lsb == -6502338462329705636
    assert decode_request(encode_request(request)) == request
    assert request_from_wire(json.loads(json.dumps(request_to_wire(request)))) == request


def test_reader_resolves_an_older_writer_without_optional_fields() -> None:
    old = json.loads(schema_json())
    old["fields"] = [
        f for f in old["fields"] if f["name"] not in ("checkLedgerStillInUse", "properties", "schemaId")
    ]
    record = {k: v for k, v in request_to_wire(simple(9)).items() if k in {f["name"] for f in old["fields"]}}
    decoded = decode_request(encode_record(record, old), writer_schema=old)
    assert decoded.ledger_id == 9 and decoded.check_ledger_still_in_use is True and decoded.properties == {}


def test_reader_resolves_a_newer_writer_with_an_extra_field() -> None:
    new = json.loads(schema_json())
    new["fields"].append({"name": "brokerId", "type": "string", "default": ""})
    record = request_to_wire(simple(10)) | {"brokerId": "broker-7"}
    assert decode_request(encode_record(record, new), writer_schema=new).ledger_id == 10


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x0at/n", encode_request(simple())[:-1], encode_request(simple()) + b"\x00", b"\xff" * 40],
    ids=["empty", "truncated-string", "truncated-record", "trailing-byte", "garbage"],
)
def test_undecodable_payloads_are_invalid_requests(payload: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        decode_request(payload)


def mutate(path: list[str | int], value: object) -> dict[str, object]:
    record = copy.deepcopy(OFFLOADED)
    target: object = record
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    return record


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (mutate(["ledgerId"], -1), "outside"),
        (mutate(["ledgerId"], "12"), "integer"),
        (mutate(["ledgerId"], True), "integer"),
        (mutate(["ledgerType"], "TAPE"), "ledgerType"),
        (mutate(["ledgerComponent"], None), "ledgerComponent"),
        (mutate(["topicName"], "../../etc/passwd"), "topicName"),
        (mutate(["topicName"], "public/default/a/b/c"), "topicName"),
        (mutate(["topicName"], "public/default/"), "topicName"),
        (mutate(["topicName"], "x" * 2000), "longer"),
        (mutate(["context", "offloadContext"], None), "offloadContext is required"),
        (mutate(["context", "offloadContext", "uidMsb"], 0) | {}, None),  # still has lsb: valid
        (mutate(["context", "ledgerId"], 13), "differs"),
        (mutate(["context", "offloadContext", "offloadSegment"], [{"uidMsb": 0, "uidLsb": 0}]), "no uid"),
        (mutate(["properties"], {"a": 1}), "strings"),
        (mutate(["cursorName"], "a/b"), "cursorName"),
        (mutate(["unexpected"], 1), "unknown field"),
        (mutate(["ledgerComponent"], "MANAGED_CURSOR"), "cursorName is required"),
        (mutate(["ledgerComponent"], "SCHEMA_STORAGE"), "schemaId is required"),
    ],
)
def test_invalid_requests_are_rejected_with_the_field_named(
    record: dict[str, object], message: str | None
) -> None:
    if message is None:
        request_from_wire(record)
        return
    with pytest.raises(InvalidRequestError, match=message):
        request_from_wire(record)


def test_derived_names() -> None:
    request = request_from_wire(OFFLOADED)
    assert request.managed_ledger_name == "public/default/persistent/orders-partition-1"
    assert request.tenant == "public" and request.namespace == "public/default"
    # One workflow per offloaded copy: the uuid is the one of its object keys (Java's UUID.toString()).
    uuid = offload_uuid(4551604436496895521, -6502338462329705636)
    assert request.workflow_id == f"ledger-deletion/OFFLOAD_LEDGER/12/{uuid}"
    other_copy = replace(
        request.context.offload_context,  # type: ignore[union-attr]
        uid_lsb=1,
    )
    retried = replace(request, context=replace(request.context, offload_context=other_copy))  # type: ignore[arg-type]
    assert retried.workflow_id != request.workflow_id  # a second copy is not joined to the first
    assert replace(request, properties={"x": "y"}).workflow_id == request.workflow_id  # a duplicate is
    in_bookkeeper = request_from_wire({**OFFLOADED, "ledgerType": "LEDGER"})
    assert in_bookkeeper.workflow_id == "ledger-deletion/LEDGER/12"  # a BK ledger has one copy
    assert len(request.summary()) <= 200
