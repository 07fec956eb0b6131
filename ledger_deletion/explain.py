"""What the Temporal UI says about a deletion before anyone opens its JSON: the run's summary and details.

Temporal keeps both as the run's user metadata (``static_summary``, ``static_details`` of the start), shown
at the top of the workflow's page; the details are Markdown. The workflow adds its current details as it
goes (the step it is in, what it waits for), and a summary on each activity and timer.

Pure module (no I/O): the ingest uses it when it starts a run.
"""

from __future__ import annotations

from ledger_deletion.contracts import MessageRef, Mode
from ledger_deletion.formats.offload_keys import BUCKET_PROPERTY, offload_uuid
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

SHADOW_TAG = "[shadow] "
_MAX_PROPERTIES = 8
_MODES = {
    Mode.LIVE: "**Live**: deletes what every check below allows.",
    Mode.SHADOW: (
        "**Shadow**: makes the decision a live run would make, on the same checks, and deletes nothing. "
        "Its outcome says what live mode would have done: `WOULD_DELETE` with its evidence (the znode "
        "version verified, the bytes, the keys), or the same skip a live run would report."
    ),
}


def summary(request: PendingDeleteLedgerInfo, mode: Mode) -> str:
    """One line, e.g. ``Delete data ledger 901 of t/ns/orders from BookKeeper``; shadow runs say so first."""
    text = request.summary()
    return (text if mode is Mode.LIVE else SHADOW_TAG + text)[:200]


def details(request: PendingDeleteLedgerInfo, mode: Mode, message: MessageRef) -> str:
    """What the run is about and what it will do, in Markdown."""
    lines = [_MODES[mode], ""]
    lines.append(f"- **Ledger** {request.ledger_id}, {_component(request)} of `{request.topic_name}`")
    lines.append(f"- **Managed ledger** `{request.managed_ledger_name}`")
    lines.append(f"- **Stored in** {_where(request)}")
    check = "asked for by the request" if request.check_ledger_still_in_use else "not asked for"
    lines.append(f"- **Owner broker's in-use check** {check}")
    if message.topic:
        again = f", redelivered {message.redelivery_count} time(s)" if message.redelivery_count else ""
        lines.append(f"- **Received from** `{message.topic}`{again}")
    lines.append(f"- **Message** `{message.message_id}`")
    if request.properties:
        lines.append(f"- **Sent with properties** {_properties(request)}")
    if message.replay_reason:
        lines.append(f"- **Kept for replay** {message.replay_reason}")
    lines.append(f"- **Steps** {_steps(request, mode)}")
    return "\n".join(lines)


def _properties(request: PendingDeleteLedgerInfo) -> str:
    """The sender's properties (the watcher and reconcile tag theirs with ``source``), a few and short: the
    details are stored with the run, and a request's properties are the sender's to fill."""
    shown = [f"`{k[:40]}={v[:80]}`" for k, v in sorted(request.properties.items())[:_MAX_PROPERTIES]]
    more = len(request.properties) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _component(request: PendingDeleteLedgerInfo) -> str:
    if request.ledger_component is LedgerComponent.MANAGED_CURSOR:
        return f"the ledger of cursor `{request.cursor_name}`"
    if request.ledger_component is LedgerComponent.SCHEMA_STORAGE:
        return f"a ledger of schema `{request.schema_id}`"
    return "a data ledger"


def _where(request: PendingDeleteLedgerInfo) -> str:
    if request.ledger_type is LedgerType.LEDGER:
        return "BookKeeper (its znode under the ledgers root)"
    offload = request.context.offload_context if request.context else None
    if offload is None:
        return "tiered storage"
    driver = offload.driver_metadata
    bucket = driver.properties.get(BUCKET_PROPERTY, "") if driver else ""
    uid = offload_uuid(offload.uid_msb, offload.uid_lsb) if offload.has_uid else "none"
    parts = [
        f"offload {uid}",
        f"driver {driver.name}" if driver else "",
        f"bucket {bucket}" if bucket else "",
    ]
    return "tiered storage (" + ", ".join(p for p in parts if p) + ")"


def _steps(request: PendingDeleteLedgerInfo, mode: Mode) -> str:
    if request.ledger_type is LedgerType.LEDGER:
        checks = "`check_topic` and `verify_bk_metadata`, then `ask_owner_broker` (asked again while in use)"
        act = (
            "`delete_bk_ledger` (compare-and-delete at the verified znode version)"
            if mode is Mode.LIVE
            else "no delete: the znode and version it would delete are recorded"
        )
    else:
        checks = (
            "`check_topic`, then `ask_owner_broker` and `check_offload_listed` (asked again while in use)"
        )
        act = (
            "`delete_offload_segment` (data and index objects, their owner tags checked first)"
            if mode is Mode.LIVE
            else "`inspect_offload_segment` (the same checks, HEAD only: the keys and sizes it would delete)"
        )
    return f"{checks}; {act}; then `ack_messages`"
