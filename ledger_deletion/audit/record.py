"""The audit record: one row per decided request, and its Parquet schema.

A record is written by the process that acks the request's message, before the ack, so a request acked
without its record cannot happen; a crash between the write and the ack writes the same record again on
the retry, and readers keep one row per ``record_id`` (workflow id, run id, message id).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from ledger_deletion.audit.notes import source_of
from ledger_deletion.contracts import AuditNote
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.tenancy import namespace_of_topic, tenant_of_topic

# The outcomes that freed storage: what ``audit --summary`` and the reclaimed-bytes metric count.
RECLAIMED_OUTCOMES = frozenset({"DELETED"})
INGEST = "ingest"  # the workflow id part of a record the ingest writes for a message no workflow decided

_TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("decided_at", _TS),
        pa.field("deleted_at", _TS),
        pa.field("written_at", _TS),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("failed_step", pa.string()),
        pa.field("mode", pa.string()),
        pa.field("request", pa.string()),
        pa.field("request_type", pa.string()),
        pa.field("ledger_id", pa.int64(), nullable=False),
        pa.field("component", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("tenant", pa.string()),
        pa.field("namespace", pa.string()),
        pa.field("source", pa.string()),
        pa.field("message_id", pa.string()),
        pa.field("message_topic", pa.string()),
        pa.field("redelivery_count", pa.int32()),
        pa.field("keys", pa.list_(pa.string())),
        pa.field("bytes", pa.int64()),
        # JSON object: each step's last answer by step name (see ledger_deletion/audit/notes.py).
        pa.field("evidence", pa.string()),
        pa.field("workflow_id", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("worker", pa.string()),  # the process that wrote the record and acked the message
    ]
)


@dataclass(frozen=True)
class AuditRecord:
    record_id: str
    decided_at: datetime | None
    deleted_at: datetime | None
    written_at: datetime | None
    outcome: str
    reason: str
    failed_step: str
    mode: str
    request: str
    request_type: str
    ledger_id: int
    component: str
    topic: str
    tenant: str
    namespace: str
    source: str
    message_id: str
    message_topic: str
    redelivery_count: int
    keys: list[str] = field(default_factory=list)
    bytes: int = 0
    evidence: str = "{}"
    workflow_id: str = ""
    run_id: str = ""
    worker: str = ""

    @property
    def day(self) -> str:
        """The record's partition: the UTC day of its decision."""
        return (self.decided_at or self.written_at or datetime.now(UTC)).strftime("%Y-%m-%d")

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("decided_at", "deleted_at", "written_at"):
            out[key] = out[key].isoformat() if out[key] is not None else None
        out["evidence"] = json.loads(self.evidence or "{}")
        return out


def record_id(workflow_id: str, run_id: str, message_id: str) -> str:
    """The same message acked by the same run is the same record, however often it is written."""
    return f"{workflow_id}/{run_id}/{message_id}"


def from_note(
    note: AuditNote, *, workflow_id: str, run_id: str, worker: str, written_at: datetime
) -> AuditRecord:
    return AuditRecord(
        record_id=record_id(workflow_id, run_id, note.message_id),
        decided_at=_parse(note.decided_at),
        deleted_at=_parse(note.deleted_at),
        written_at=written_at,
        outcome=note.outcome.value,
        reason=note.reason,
        failed_step=note.failed_step,
        mode=note.mode.value,
        request=note.request,
        request_type=note.ledger_type,
        ledger_id=note.ledger_id,
        component=note.component,
        topic=note.topic_name,
        tenant=tenant_of_topic(note.topic_name),
        namespace=namespace_of_topic(note.topic_name),
        source=note.source,
        message_id=note.message_id,
        message_topic=note.message_topic,
        redelivery_count=note.redelivery_count,
        keys=list(note.keys),
        bytes=note.bytes,
        evidence=json.dumps(
            {step: json.loads(answer) for step, answer in sorted(note.evidence.items())}, sort_keys=True
        ),
        workflow_id=workflow_id,
        run_id=run_id,
        worker=worker,
    )


def to_table(records: list[AuditRecord]) -> pa.Table:
    return pa.Table.from_pylist([asdict(r) for r in records], schema=SCHEMA)


def from_table(table: pa.Table) -> list[AuditRecord]:
    """Rows of any file of this log; columns a later version added are dropped, missing ones defaulted."""
    names = set(AuditRecord.__dataclass_fields__)
    rows = []
    for row in table.to_pylist():
        known = {k: v for k, v in row.items() if k in names}
        rows.append(AuditRecord(**_defaults() | {k: v for k, v in known.items() if v is not None}))
    return rows


def _defaults() -> dict[str, Any]:
    return {
        "decided_at": None,
        "deleted_at": None,
        "written_at": None,
        "reason": "",
        "failed_step": "",
        "mode": "live",
        "request": "",
        "request_type": "",
        "component": "",
        "topic": "",
        "tenant": "",
        "namespace": "",
        "source": "",
        "message_id": "",
        "message_topic": "",
        "redelivery_count": 0,
    }


def _parse(when: str) -> datetime | None:
    if not when:
        return None
    parsed = datetime.fromisoformat(when)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def ingest_record(
    message_id: str,
    *,
    request: PendingDeleteLedgerInfo | None,
    message_topic: str,
    reason: str,
    step: str,
    shadow: bool,
    workflow_id: str,
    worker: str,
    now: datetime,
) -> AuditRecord:
    """A message the ingest dead-letters itself (no workflow decides it: it does not decode, names another
    namespace, or Temporal refuses its start): recorded by the ingest before its ack. ``ledger_id`` is -1
    when the payload does not say."""
    topic = request.topic_name if request is not None else ""
    return AuditRecord(
        record_id=record_id(workflow_id or INGEST, "", message_id),
        decided_at=now,
        deleted_at=None,
        written_at=now,
        outcome="WOULD_DEAD_LETTER" if shadow else "DEAD_LETTERED",
        reason=reason,
        failed_step=step,
        mode="shadow" if shadow else "live",
        request=request.summary() if request is not None else "",
        request_type=request.ledger_type.value if request is not None else "",
        ledger_id=request.ledger_id if request is not None else -1,
        component=request.ledger_component.value if request is not None else "",
        topic=topic,
        tenant=tenant_of_topic(topic) if topic else "",
        namespace=namespace_of_topic(topic) if topic else "",
        source=source_of(request) if request is not None else "",
        message_id=message_id,
        message_topic=message_topic,
        redelivery_count=0,
        workflow_id=workflow_id,
        worker=worker,
    )
