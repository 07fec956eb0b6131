"""What the workflow sends with an ack for the audit log (``AuditNote``): pure, deterministic, no I/O.

The workflow keeps, per decision, the last answer of every step it ran; a note carries them as JSON by step
name, so a reader months later sees the znode version, state and length, the owner's and the store's answers
and the objects' keys and sizes without Temporal's history (which retention removes).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ledger_deletion.contracts import AuditNote, Decision, MessageRef, Mode, Outcome
from ledger_deletion.request import PendingDeleteLedgerInfo

SOURCE_PROPERTY = "source"  # what reconcile, the watcher and submit tag their requests with
BROKER = "broker"  # a request without the tag: the broker's mark phase (PIP-186)
# The steps that change something: the time their answer came is the delete's time.
DESTRUCTIVE_STEPS = ("delete_bk_ledger", "delete_offload_segment")


def evidence_json(result: Any, at: str) -> str:
    """One step's answer as JSON, with when it came (workflow time). Sorted keys: the same answer gives the
    same text on every replay."""
    is_instance = dataclasses.is_dataclass(result) and not isinstance(result, type)
    body = dataclasses.asdict(result) if is_instance else {"value": result}
    body["at"] = at
    return json.dumps(body, sort_keys=True, default=str)


def source_of(request: PendingDeleteLedgerInfo) -> str:
    return request.properties.get(SOURCE_PROPERTY) or BROKER


def note_for(
    ref: MessageRef,
    request: PendingDeleteLedgerInfo,
    decision: Decision,
    evidence: Mapping[str, str],
    decided_at: str,
    mode: Mode,
) -> AuditNote:
    deleted_at = ""
    if decision.outcome is Outcome.DELETED:
        for step in DESTRUCTIVE_STEPS:
            if step in evidence:
                deleted_at = str(json.loads(evidence[step]).get("at", ""))
    return AuditNote(
        message_id=ref.message_id,
        request=decision.request,
        ledger_id=request.ledger_id,
        ledger_type=request.ledger_type.value,
        component=request.ledger_component.value,
        topic_name=request.topic_name,
        source=source_of(request),
        outcome=decision.outcome,
        reason=decision.reason,
        failed_step=decision.failed_step,
        mode=mode,
        keys=list(decision.deleted_keys or decision.would_delete_keys),
        bytes=decision.bytes,
        evidence=dict(evidence),
        decided_at=decided_at,
        deleted_at=deleted_at,
        message_topic=ref.topic,
        redelivery_count=ref.redelivery_count,
    )
