"""Reading deletions back from Temporal: the list (visibility + search attributes) and one workflow's steps
(from its event history), so ``list`` and ``show`` answer from the same source the UI shows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from ledger_deletion import search_attributes as sa
from ledger_deletion.contracts import DeletionStatus

WORKFLOW_TYPE = "LedgerDeletionWorkflow"
_QUOTE = re.compile(r"[\"\\]")


def _literal(value: str) -> str:
    return '"' + _QUOTE.sub(lambda m: "\\" + m.group(0), value) + '"'


def visibility_query(
    *,
    outcome: str | None = None,
    topic: str | None = None,
    tenant: str | None = None,
    namespace: str | None = None,
    running: bool = False,
    ledger_id: int | None = None,
    mode: str | None = None,
    step: str | None = None,
    task_queue: str | None = None,
) -> str:
    """The Temporal visibility query for the filters (the same text works in the UI's search box)."""
    clauses = [f"WorkflowType = {_literal(WORKFLOW_TYPE)}"]
    if outcome:
        clauses.append(f"{sa.DELETION_OUTCOME.name} = {_literal(outcome.upper())}")
    if topic:
        clauses.append(f"{sa.PULSAR_TOPIC.name} = {_literal(topic)}")
    if tenant:
        clauses.append(f"{sa.PULSAR_TENANT.name} = {_literal(tenant)}")
    if namespace:
        clauses.append(f"{sa.PULSAR_NAMESPACE.name} = {_literal(namespace)}")
    if running:
        clauses.append('ExecutionStatus = "Running"')
    if ledger_id is not None:
        clauses.append(f"{sa.LEDGER_ID.name} = {int(ledger_id)}")
    if mode:
        clauses.append(f"{sa.DELETION_MODE.name} = {_literal(mode.lower())}")
    if step:
        clauses.append(f"{sa.DELETION_STEP.name} = {_literal(step)}")
    if task_queue:
        clauses.append(f"TaskQueue = {_literal(task_queue)}")
    return " AND ".join(clauses)


@dataclass(frozen=True)
class DeletionRow:
    workflow_id: str
    run_id: str
    status: str
    ledger_id: int | None
    ledger_type: str
    component: str
    topic: str
    tenant: str
    namespace: str
    step: str
    outcome: str
    started: datetime | None
    closed: datetime | None
    mode: str = ""
    bytes: int | None = None  # DELETED: freed; WOULD_DELETE: would be (where metadata says)

    def as_json(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "started": _iso(self.started),
            "closed": _iso(self.closed),
        }


def row_of(execution: WorkflowExecution) -> DeletionRow:
    attrs = execution.typed_search_attributes
    return DeletionRow(
        workflow_id=execution.id,
        run_id=execution.run_id,
        status=execution.status.name if execution.status else "UNKNOWN",
        ledger_id=attrs.get(sa.LEDGER_ID),
        ledger_type=attrs.get(sa.LEDGER_TYPE) or "",
        component=attrs.get(sa.LEDGER_COMPONENT) or "",
        topic=attrs.get(sa.PULSAR_TOPIC) or "",
        tenant=attrs.get(sa.PULSAR_TENANT) or "",
        namespace=attrs.get(sa.PULSAR_NAMESPACE) or "",
        step=attrs.get(sa.DELETION_STEP) or "",
        outcome=attrs.get(sa.DELETION_OUTCOME) or "",
        started=execution.start_time,
        closed=execution.close_time,
        mode=attrs.get(sa.DELETION_MODE) or "",
        bytes=attrs.get(sa.DELETION_BYTES),
    )


async def list_deletions(client: Client, query: str, limit: int = 200) -> list[DeletionRow]:
    rows: list[DeletionRow] = []
    async for execution in client.list_workflows(query, limit=limit):
        rows.append(row_of(execution))
    return rows


# --- show ---------------------------------------------------------------------------------------------


@dataclass
class StepRecord:
    """One scheduled activity (all its attempts), one read-only check (a local activity's marker), or a
    durable wait."""

    step: str
    scheduled: datetime | None = None
    started: datetime | None = None
    finished: datetime | None = None
    attempts: int = 0
    # scheduled | running | completed | failed | timed_out | canceled | backing_off | fired
    state: str = "scheduled"
    error: str = ""

    @property
    def seconds(self) -> float | None:
        begin = self.scheduled
        if begin is None or self.finished is None:
            return None
        return (self.finished - begin).total_seconds()

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "scheduled": _iso(self.scheduled),
            "started": _iso(self.started),
            "finished": _iso(self.finished),
            "seconds": self.seconds,
            "attempts": self.attempts,
            "state": self.state,
            "error": self.error,
        }


@dataclass
class DeletionDetail:
    row: DeletionRow
    summary: str = ""
    result: dict[str, Any] | None = None
    failure: str = ""
    status: DeletionStatus | None = None  # live status query (running workflows)
    steps: list[StepRecord] = field(default_factory=list)
    messages: int = 0  # messages that joined: the one that started the run, then add_message signals

    def as_json(self) -> dict[str, Any]:
        return {
            **self.row.as_json(),
            "summary": self.summary,
            "result": self.result,
            "failure": self.failure,
            "live_status": self.status.__dict__ if self.status else None,
            "messages_joined": self.messages,
            "steps": [s.as_json() for s in self.steps],
        }


async def find_workflow_ids(client: Client, ref: str) -> list[str]:
    """A workflow id as given, or every deletion workflow of a ledger id (LEDGER and OFFLOAD_LEDGER)."""
    if not ref.isdigit():
        return [ref]
    ids: list[str] = []
    async for execution in client.list_workflows(visibility_query(ledger_id=int(ref)), limit=50):
        if execution.id not in ids:
            ids.append(execution.id)
    return ids


async def describe_deletion(client: Client, workflow_id: str) -> DeletionDetail:
    handle = client.get_workflow_handle(workflow_id)
    description = await handle.describe()
    detail = DeletionDetail(row=row_of(description))
    detail.summary = (await description.static_summary()) or ""
    history = await handle.fetch_history()
    steps, detail.messages, detail.result, detail.failure = _steps_from_history(
        history.events, client.data_converter.payload_converter
    )
    detail.steps = steps
    if description.status == WorkflowExecutionStatus.RUNNING:
        _merge_pending(detail.steps, description.raw_description.pending_activities)
        try:
            detail.status = await handle.query("status", result_type=DeletionStatus)
        except RPCError:
            detail.status = None  # no worker to answer right now: the history still tells the story
    return detail


def _steps_from_history(
    events: Iterable[HistoryEvent], converter: Any
) -> tuple[list[StepRecord], int, dict[str, Any] | None, str]:
    steps: list[StepRecord] = []
    by_event: dict[int, StepRecord] = {}
    messages = 0
    result: dict[str, Any] | None = None
    failure = ""
    for event in events:
        when = event.event_time.ToDatetime(tzinfo=UTC)
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            record = StepRecord(
                event.activity_task_scheduled_event_attributes.activity_type.name, scheduled=when
            )
            steps.append(record)
            by_event[event.event_id] = record
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            record = by_event[attrs.scheduled_event_id]
            record.started, record.attempts, record.state = when, attrs.attempt, "running"
            if attrs.HasField("last_failure"):
                record.error = _failure_text(attrs.last_failure)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            record = by_event[event.activity_task_completed_event_attributes.scheduled_event_id]
            record.finished, record.state = when, "completed"
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs_f = event.activity_task_failed_event_attributes
            record = by_event[attrs_f.scheduled_event_id]
            record.finished, record.state, record.error = when, "failed", _failure_text(attrs_f.failure)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            attrs_t = event.activity_task_timed_out_event_attributes
            record = by_event[attrs_t.scheduled_event_id]
            record.finished, record.state, record.error = when, "timed_out", _failure_text(attrs_t.failure)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
            record = by_event[event.activity_task_canceled_event_attributes.scheduled_event_id]
            record.finished, record.state = when, "canceled"
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            check = _local_activity(event, converter)
            if check is not None:
                steps.append(check)
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            # The workflow names each timer by the step it waits in (wait_in_use, wait_ledger_age); the SDK's
            # own timer before a check's next attempt, when its backoff is too long to wait in the workflow
            # task, has no name.
            summary = event.user_metadata.summary
            step = converter.from_payloads([summary], [str])[0] if summary.data else "retry_backoff"
            record = StepRecord(str(step), scheduled=when, state="waiting", attempts=1)
            steps.append(record)
            by_event[event.event_id] = record
        elif kind == EventType.EVENT_TYPE_TIMER_FIRED:
            record = by_event[event.timer_fired_event_attributes.started_event_id]
            record.finished, record.state = when, "fired"
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            # Runs started by the ingest carry their first message in the input; later ones join by signal.
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            if payloads:
                started_with = converter.from_payloads(list(payloads)[:1], [dict])[0]
                messages += isinstance(started_with, dict) and started_with.get("first_message") is not None
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            messages += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
            if payloads:
                value = converter.from_payloads(list(payloads), [dict])[0]
                result = value if isinstance(value, dict) else {"value": value}
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = _failure_text(event.workflow_execution_failed_event_attributes.failure)
    return steps, messages, result, failure


def _local_activity(event: HistoryEvent, converter: Any) -> StepRecord | None:
    """A read-only check, run as a local activity: the SDK records each in one marker, with its type, its
    attempts and when it was first scheduled (``data``), and its result or its last failure. A failure with a
    ``backoff`` is retried after a durable timer, in a marker of its own."""
    attrs = event.marker_recorded_event_attributes
    payloads = attrs.details["data"].payloads if "data" in attrs.details else []
    if attrs.marker_name != "core_local_activity" or not payloads:
        return None  # another kind of marker (a version marker)
    data = converter.from_payloads(list(payloads)[:1], [dict])[0]
    if not isinstance(data, dict) or not data.get("activity_type"):
        return None
    finished = event.event_time.ToDatetime(tzinfo=UTC)
    record = StepRecord(
        str(data["activity_type"]),
        scheduled=_timestamp(data.get("original_schedule_time")) or finished,
        finished=finished,
        attempts=int(data.get("attempt") or 1),
        state="completed",
    )
    if attrs.HasField("failure"):
        record.state = "backing_off" if data.get("backoff") else "failed"
        record.error = _failure_text(attrs.failure)
    return record


def _timestamp(value: Any) -> datetime | None:
    """A protobuf Timestamp as the SDK writes it into a marker (``{"seconds": …, "nanos": …}``)."""
    if not isinstance(value, dict) or "seconds" not in value:
        return None
    return datetime.fromtimestamp(int(value["seconds"]) + int(value.get("nanos") or 0) / 1e9, tz=UTC)


def _merge_pending(steps: list[StepRecord], pending: Iterable[Any]) -> None:
    """Retries leave no history events until the last attempt: take attempt and last error from describe."""
    for activity in pending:
        for record in reversed(steps):
            if record.step == activity.activity_type.name and record.finished is None:
                record.attempts = max(record.attempts, activity.attempt)
                record.state = "retrying" if activity.attempt > 1 else record.state
                if activity.HasField("last_failure"):
                    record.error = _failure_text(activity.last_failure)
                break


def _failure_text(failure: Any) -> str:
    parts: list[str] = []
    while failure is not None and failure.message:
        kind = failure.application_failure_info.type if failure.HasField("application_failure_info") else ""
        text = f"{kind}: {failure.message}" if kind else failure.message
        if not parts or parts[-1] != text:  # activity failures wrap their cause with the same text
            parts.append(text)
        failure = failure.cause if failure.HasField("cause") else None
    return " <- ".join(parts)[:500]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
