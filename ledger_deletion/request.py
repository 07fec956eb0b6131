"""The deletion request: PIP-186's ``PendingDeleteLedgerInfo`` as typed, validated Python values.

This module is pure (no I/O) so workflow code can use it. Field names of the wire forms (Avro record and
JSON lines) are the camelCase names of the Avro schema; the dataclasses use snake_case. Conversion in both
directions lives here so the Avro codec, ``submit`` and the workflow agree on one shape.

Annotations are evaluated when each class is defined (no ``from __future__ import annotations``): these
dataclasses travel in workflow payloads, see ``contracts.py``.
"""

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

from ledger_deletion.errors import InvalidRequestError

MAX_LEDGER_ID = 2**63 - 1
_U64 = 2**64 - 1
_S64_MIN = -(2**63)
MAX_NAME_LENGTH = 1024
MAX_PROPERTIES = 64
MAX_SEGMENTS = 1024

# Pulsar names: tenant/namespace/local (V2) or tenant/cluster/namespace/local (V1). The local part is the
# encoded form found in managed-ledger names (URLEncoder: letters, digits, ``.-*_+%``), plus ``=:`` which
# Pulsar allows unencoded in practice. No ``/``, no ``..``, no control characters.
_NAME_SEGMENT = r"[A-Za-z0-9_.=:%+*-]+"
_TOPIC_NAME = re.compile(rf"^{_NAME_SEGMENT}/{_NAME_SEGMENT}(/{_NAME_SEGMENT})?/{_NAME_SEGMENT}$")
_SCHEMA_ID = _TOPIC_NAME
_CURSOR_NAME = re.compile(rf"^{_NAME_SEGMENT}$")
_E = TypeVar("_E", bound=StrEnum)


class LedgerComponent(StrEnum):
    MANAGED_LEDGER = "MANAGED_LEDGER"
    MANAGED_CURSOR = "MANAGED_CURSOR"
    SCHEMA_STORAGE = "SCHEMA_STORAGE"


class LedgerType(StrEnum):
    LEDGER = "LEDGER"
    OFFLOAD_LEDGER = "OFFLOAD_LEDGER"


def offload_uuid(msb: int, lsb: int) -> str:
    """``new UUID(msb, lsb).toString()``: the two signed longs are the high and low 64 bits of the uuid. An
    offloaded ledger's workflow id and its object keys (``formats.offload_keys``) both derive from it.

    Raises:
        ValueError: a part outside the signed (or, tolerated, unsigned) 64-bit range.
    """
    for part in (msb, lsb):
        if not _S64_MIN <= part <= _U64:
            raise ValueError(f"uuid part {part} does not fit in 64 bits")
    return str(uuid.UUID(int=((msb & _U64) << 64) | (lsb & _U64)))


@dataclass(frozen=True)
class OffloadDriverMetadata:
    name: str
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OffloadSegment:
    uid_msb: int
    uid_lsb: int
    complete: bool = False
    assigned_timestamp: int = 0
    offloaded_timestamp: int = 0
    end_entry_id: int = -1
    driver_metadata: OffloadDriverMetadata | None = None


@dataclass(frozen=True)
class OffloadContext:
    uid_msb: int = 0
    uid_lsb: int = 0
    complete: bool = False
    bookkeeper_deleted: bool = False
    timestamp: int = 0
    driver_metadata: OffloadDriverMetadata | None = None
    offload_segment: list[OffloadSegment] = field(default_factory=list)

    @property
    def has_uid(self) -> bool:
        return self.uid_msb != 0 or self.uid_lsb != 0


@dataclass(frozen=True)
class LedgerInfo:
    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp: int = 0
    offload_context: OffloadContext | None = None


@dataclass(frozen=True)
class PendingDeleteLedgerInfo:
    """One request to delete one ledger from one place (BookKeeper or tiered storage)."""

    topic_name: str
    ledger_component: LedgerComponent
    ledger_type: LedgerType
    ledger_id: int
    cursor_name: str | None = None
    schema_id: str | None = None
    context: LedgerInfo | None = None
    check_ledger_still_in_use: bool = True
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tenant(self) -> str:
        return self.topic_name.split("/", 1)[0]

    @property
    def namespace(self) -> str:
        """``tenant/namespace`` (V2) or ``tenant/cluster/namespace`` (V1)."""
        return self.topic_name.rsplit("/", 1)[0]

    @property
    def managed_ledger_name(self) -> str:
        """The managed-ledger name Pulsar tags BK ledgers with: ``tenant/ns/persistent/local``."""
        namespace, local = self.topic_name.rsplit("/", 1)
        return f"{namespace}/persistent/{local}"

    @property
    def workflow_id(self) -> str:
        """One workflow per (type, ledger), and per offload for an offloaded ledger: a second request for
        the same thing joins the first; acked with its outcome when it is the same request
        (:func:`same_decision`), decided on its own by that run when it is not.

        A ledger can be offloaded more than once (a failed attempt leaves objects under another uuid), and
        each copy is its own deletion: keyed by ledger alone, a request for the second copy would join the
        first's workflow and be acked without its objects ever being looked at.
        """
        base = f"ledger-deletion/{self.ledger_type.value}/{self.ledger_id}"
        offload = self.context.offload_context if self.context else None
        if self.ledger_type is not LedgerType.OFFLOAD_LEDGER or offload is None:
            return base
        if offload.has_uid:
            return f"{base}/{offload_uuid(offload.uid_msb, offload.uid_lsb)}"
        first = offload.offload_segment[0] if offload.offload_segment else None
        return f"{base}/{offload_uuid(first.uid_msb, first.uid_lsb)}" if first else base

    def summary(self) -> str:
        what = {
            LedgerComponent.MANAGED_LEDGER: "data",
            LedgerComponent.MANAGED_CURSOR: f"cursor {self.cursor_name}",
            LedgerComponent.SCHEMA_STORAGE: f"schema {self.schema_id}",
        }[self.ledger_component]
        where = "BookKeeper" if self.ledger_type is LedgerType.LEDGER else "tiered storage"
        return f"Delete {what} ledger {self.ledger_id} of {self.topic_name} from {where}"[:200]


def same_decision(request: PendingDeleteLedgerInfo, decided: PendingDeleteLedgerInfo) -> bool:
    """Is ``request`` decided as ``decided`` was? Everything counts but the sender's properties and
    checkLedgerStillInUse (a run honours any of its messages' asks for the in-use check)."""
    check, properties = decided.check_ledger_still_in_use, decided.properties
    return replace(request, check_ledger_still_in_use=check, properties=properties) == decided


# ---------------------------------------------------------------------------------------------------------
# Wire shape (camelCase dicts, as in the Avro schema and in JSON lines) <-> dataclasses, with validation.
# ---------------------------------------------------------------------------------------------------------


def request_from_wire(record: Mapping[str, Any]) -> PendingDeleteLedgerInfo:
    """Build and validate a request from its wire shape (an Avro record or a parsed JSON line).

    Raises:
        InvalidRequestError: with a message naming the offending field.
    """
    if not isinstance(record, Mapping):
        raise InvalidRequestError(f"request must be an object, got {type(record).__name__}")
    known = {
        "topicName",
        "ledgerComponent",
        "ledgerType",
        "ledgerId",
        "cursorName",
        "schemaId",
        "context",
        "checkLedgerStillInUse",
        "properties",
    }
    unknown = sorted(set(record) - known)
    if unknown:
        raise InvalidRequestError(f"unknown field(s): {', '.join(map(str, unknown))[:200]}")
    topic_name = _name(record.get("topicName"), "topicName", _TOPIC_NAME)
    component = _enum(LedgerComponent, record.get("ledgerComponent"), "ledgerComponent")
    ledger_type = _enum(LedgerType, record.get("ledgerType"), "ledgerType")
    ledger_id = _ledger_id(record.get("ledgerId"), "ledgerId")
    cursor_name = _optional_name(record.get("cursorName"), "cursorName", _CURSOR_NAME)
    schema_id = _optional_name(record.get("schemaId"), "schemaId", _SCHEMA_ID)
    check = record.get("checkLedgerStillInUse", True)
    if check is None:
        check = True
    if not isinstance(check, bool):
        raise InvalidRequestError("checkLedgerStillInUse must be a boolean")
    context = _ledger_info(record.get("context"), "context")
    request = PendingDeleteLedgerInfo(
        topic_name=topic_name,
        ledger_component=component,
        ledger_type=ledger_type,
        ledger_id=ledger_id,
        cursor_name=cursor_name,
        schema_id=schema_id,
        context=context,
        check_ledger_still_in_use=check,
        properties=_string_map(record.get("properties"), "properties"),
    )
    _check_consistency(request)
    return request


def request_to_wire(request: PendingDeleteLedgerInfo) -> dict[str, Any]:
    """The request as a camelCase dict, ready for the Avro writer or ``json.dumps``."""
    return {
        "topicName": request.topic_name,
        "ledgerComponent": request.ledger_component.value,
        "ledgerType": request.ledger_type.value,
        "ledgerId": request.ledger_id,
        "cursorName": request.cursor_name,
        "schemaId": request.schema_id,
        "context": _ledger_info_to_wire(request.context) if request.context else None,
        "checkLedgerStillInUse": request.check_ledger_still_in_use,
        "properties": dict(request.properties),
    }


def _check_consistency(request: PendingDeleteLedgerInfo) -> None:
    if request.ledger_component is LedgerComponent.MANAGED_CURSOR and not request.cursor_name:
        raise InvalidRequestError("cursorName is required for a MANAGED_CURSOR ledger")
    if request.ledger_component is LedgerComponent.SCHEMA_STORAGE and not request.schema_id:
        raise InvalidRequestError("schemaId is required for a SCHEMA_STORAGE ledger")
    if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
        ctx = request.context.offload_context if request.context else None
        if ctx is None:
            raise InvalidRequestError("context.offloadContext is required for an OFFLOAD_LEDGER request")
        if not ctx.has_uid and not ctx.offload_segment:
            raise InvalidRequestError(
                "offloadContext has neither a uid nor segments: no object key derivable"
            )
        if request.context is not None and request.context.ledger_id != request.ledger_id:
            raise InvalidRequestError(
                f"context.ledgerId {request.context.ledger_id} differs from ledgerId {request.ledger_id}"
            )


def _name(value: object, what: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{what} is required and must be a non-empty string")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidRequestError(f"{what} is longer than {MAX_NAME_LENGTH} characters")
    if not pattern.match(value) or any(seg in ("", ".", "..") for seg in value.split("/")):
        raise InvalidRequestError(f"{what} {value[:80]!r} is not a valid Pulsar name")
    return value


def _optional_name(value: object, what: str, pattern: re.Pattern[str]) -> str | None:
    return None if value is None or value == "" else _name(value, what, pattern)


def _enum(enum: type[_E], value: object, what: str) -> _E:
    if isinstance(value, str) and value in enum._value2member_map_:
        return enum(value)
    allowed = " | ".join(m.value for m in enum)
    raise InvalidRequestError(f"{what} must be one of {allowed}, got {str(value)[:40]!r}")


def _ledger_id(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{what} must be an integer")
    if not 0 <= value <= MAX_LEDGER_ID:
        raise InvalidRequestError(f"{what} {value} is outside 0..2^63-1")
    return value


def _long(value: object, what: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise InvalidRequestError(f"{what} must be a 64-bit integer")
    return value


def _bool(value: object, what: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{what} must be a boolean")
    return value


def _string_map(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{what} must be a map of strings")
    if len(value) > MAX_PROPERTIES:
        raise InvalidRequestError(f"{what} has more than {MAX_PROPERTIES} entries")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidRequestError(f"{what} must map strings to strings")
        if len(key) > MAX_NAME_LENGTH or len(item) > MAX_NAME_LENGTH:
            raise InvalidRequestError(f"{what} entry is longer than {MAX_NAME_LENGTH} characters")
        out[key] = item
    return out


def _driver(value: object, what: str) -> OffloadDriverMetadata | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{what} must be an object")
    name = value.get("name")
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidRequestError(f"{what}.name must be a short non-empty string")
    return OffloadDriverMetadata(
        name=name, properties=_string_map(value.get("properties"), f"{what}.properties")
    )


def _segment(value: object, what: str) -> OffloadSegment:
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{what} must be an object")
    segment = OffloadSegment(
        uid_msb=_long(value.get("uidMsb"), f"{what}.uidMsb"),
        uid_lsb=_long(value.get("uidLsb"), f"{what}.uidLsb"),
        complete=_bool(value.get("complete"), f"{what}.complete"),
        assigned_timestamp=_long(value.get("assignedTimestamp"), f"{what}.assignedTimestamp"),
        offloaded_timestamp=_long(value.get("offloadedTimestamp"), f"{what}.offloadedTimestamp"),
        end_entry_id=_long(value.get("endEntryId"), f"{what}.endEntryId", default=-1),
        driver_metadata=_driver(value.get("driverMetadata"), f"{what}.driverMetadata"),
    )
    if segment.uid_msb == 0 and segment.uid_lsb == 0:
        raise InvalidRequestError(f"{what} has no uid")
    return segment


def _offload_context(value: object, what: str) -> OffloadContext | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{what} must be an object")
    segments = value.get("offloadSegment") or []
    if not isinstance(segments, list) or len(segments) > MAX_SEGMENTS:
        raise InvalidRequestError(f"{what}.offloadSegment must be a list of at most {MAX_SEGMENTS}")
    return OffloadContext(
        uid_msb=_long(value.get("uidMsb"), f"{what}.uidMsb"),
        uid_lsb=_long(value.get("uidLsb"), f"{what}.uidLsb"),
        complete=_bool(value.get("complete"), f"{what}.complete"),
        bookkeeper_deleted=_bool(value.get("bookkeeperDeleted"), f"{what}.bookkeeperDeleted"),
        timestamp=_long(value.get("timestamp"), f"{what}.timestamp"),
        driver_metadata=_driver(value.get("driverMetadata"), f"{what}.driverMetadata"),
        offload_segment=[_segment(s, f"{what}.offloadSegment[{i}]") for i, s in enumerate(segments)],
    )


def _ledger_info(value: object, what: str) -> LedgerInfo | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{what} must be an object")
    return LedgerInfo(
        ledger_id=_ledger_id(value.get("ledgerId"), f"{what}.ledgerId"),
        entries=_long(value.get("entries"), f"{what}.entries"),
        size=_long(value.get("size"), f"{what}.size"),
        timestamp=_long(value.get("timestamp"), f"{what}.timestamp"),
        offload_context=_offload_context(value.get("offloadContext"), f"{what}.offloadContext"),
    )


def _driver_to_wire(driver: OffloadDriverMetadata | None) -> dict[str, Any] | None:
    return None if driver is None else {"name": driver.name, "properties": dict(driver.properties)}


def _ledger_info_to_wire(info: LedgerInfo) -> dict[str, Any]:
    ctx = info.offload_context
    return {
        "ledgerId": info.ledger_id,
        "entries": info.entries,
        "size": info.size,
        "timestamp": info.timestamp,
        "offloadContext": None
        if ctx is None
        else {
            "uidMsb": ctx.uid_msb,
            "uidLsb": ctx.uid_lsb,
            "complete": ctx.complete,
            "bookkeeperDeleted": ctx.bookkeeper_deleted,
            "timestamp": ctx.timestamp,
            "driverMetadata": _driver_to_wire(ctx.driver_metadata),
            "offloadSegment": [
                {
                    "uidMsb": s.uid_msb,
                    "uidLsb": s.uid_lsb,
                    "complete": s.complete,
                    "assignedTimestamp": s.assigned_timestamp,
                    "offloadedTimestamp": s.offloaded_timestamp,
                    "endEntryId": s.end_entry_id,
                    "driverMetadata": _driver_to_wire(s.driver_metadata),
                }
                for s in ctx.offload_segment
            ],
        },
    }
