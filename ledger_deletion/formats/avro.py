"""PendingDeleteLedgerInfo as Avro (fastavro, schemaless single-record encoding as Pulsar's AVRO schema uses).

The schema lives in ``pending_delete_ledger_info.avsc``. Readers resolve the writer's schema against ours,
so a producer whose schema has extra fields, or lacks optional ones, still decodes (pass its schema as
``writer_schema``, e.g. the one registered on the topic).
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.types import Schema

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.request import PendingDeleteLedgerInfo, request_from_wire, request_to_wire

SCHEMA_FILE = "pending_delete_ledger_info.avsc"
MAX_PAYLOAD_BYTES = 1024 * 1024


def schema_json() -> str:
    """The schema text, as registered on the deletion topic."""
    return resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


@cache
def parsed_schema() -> Schema:
    return fastavro.parse_schema(json.loads(schema_json()))


def encode_request(request: PendingDeleteLedgerInfo) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed_schema(), request_to_wire(request))
    return buffer.getvalue()


def encode_record(record: dict[str, Any], writer_schema: dict[str, Any] | None = None) -> bytes:
    """Encode a raw record; with ``writer_schema`` this imitates a producer with another schema version."""
    schema = parsed_schema() if writer_schema is None else fastavro.parse_schema(writer_schema)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, record)
    return buffer.getvalue()


def decode_request(payload: bytes, writer_schema: dict[str, Any] | None = None) -> PendingDeleteLedgerInfo:
    """Decode and validate one message payload.

    Raises:
        InvalidRequestError: the payload does not decode completely, or decodes into an invalid request.
    """
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise InvalidRequestError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    buffer = io.BytesIO(payload)
    try:
        writer = parsed_schema() if writer_schema is None else fastavro.parse_schema(writer_schema)
        record = fastavro.schemaless_reader(buffer, writer, parsed_schema())
    except Exception as exc:  # fastavro raises a wide variety of errors on malformed input
        raise InvalidRequestError(
            f"payload is not a PendingDeleteLedgerInfo: {type(exc).__name__}: {exc}"[:300]
        ) from exc
    if buffer.tell() != len(payload):
        raise InvalidRequestError(
            f"payload has {len(payload) - buffer.tell()} trailing bytes after the record"
        )
    if not isinstance(record, dict):
        raise InvalidRequestError("payload did not decode to a record")
    return request_from_wire(record)
