"""A Temporal interceptor that labels every activity with the request it works for, and measures it.

Activities see only their own input (``delete_bk_ledger`` gets a ledger id and a znode version), yet every
metric needs the tenant and component, and every span the ledger id, topic and outcome. So the workflow side
adds one small header, ``ledger-deletion-request``, to each activity it schedules, local ones included
(computed from the workflow input, so it is deterministic), and the activity side reads it to label spans
and metrics.

The workflow side also reports each finished deletion (outcome counter, skipped-by-reason, and an
``LedgerDeletion:<OUTCOME>`` span in the request's trace) through an extern function, the SDK's sanctioned
exit from the sandbox, and only when not replaying, so a replayed history is never counted twice.

Register it on the client after ``TracingInterceptor``: workers built from the client inherit both, and the
activity spans it annotates are the ones the tracing interceptor opened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import temporalio.activity
import temporalio.api.common.v1
import temporalio.client
import temporalio.converter
import temporalio.worker
import temporalio.workflow
from opentelemetry import trace
from opentelemetry.propagate import extract

from ledger_deletion.observability import metrics, tracing

HEADER = "ledger-deletion-request"
TRACE_HEADER = "_tracer-data"  # TracingInterceptor's header: our outcome span joins the same trace
_EXTERN = "__ledger_deletion_finished"
_converter = temporalio.converter.PayloadConverter.default

# Steps whose failures are PIP-186's "delete failed" counters.
BK_DELETE = "delete_bk_ledger"
OFFLOAD_DELETE = "delete_offload_segment"
ACK = "ack_messages"
DEAD_LETTER = "publish_dead_letter"


@dataclass(frozen=True)
class RequestContext:
    """What an activity needs to know about the request it serves (no payloads, nothing secret)."""

    ledger_id: int = 0
    ledger_type: str = ""
    component: str = metrics.UNKNOWN
    topic: str = ""
    tenant: str = metrics.UNKNOWN
    outcome: str = ""

    def to_payload(self) -> temporalio.api.common.v1.Payload:
        return _converter.to_payloads([self.__dict__])[0]

    @staticmethod
    def from_headers(headers: Mapping[str, temporalio.api.common.v1.Payload]) -> RequestContext:
        payload = headers.get(HEADER)
        if payload is None:
            return RequestContext()
        try:
            data = _converter.from_payloads([payload], [dict])[0]
            return RequestContext(
                **{k: v for k, v in data.items() if k in RequestContext.__dataclass_fields__}
            )
        except Exception:  # a header from a newer/older worker must never fail an activity
            return RequestContext()


def context_of_input(arg: Any) -> RequestContext:
    """The workflow input is ``DeletionInput(request=PendingDeleteLedgerInfo, ...)``; read it defensively."""
    return context_of_request(getattr(arg, "request", None))


def context_of_request(request: Any) -> RequestContext:
    """A ``PendingDeleteLedgerInfo``'s labels, read defensively (``None`` gives the unknown context)."""
    if request is None:
        return RequestContext()
    return RequestContext(
        ledger_id=int(getattr(request, "ledger_id", 0)),
        ledger_type=str(getattr(getattr(request, "ledger_type", ""), "value", "")),
        component=str(getattr(getattr(request, "ledger_component", ""), "value", metrics.UNKNOWN)),
        topic=str(getattr(request, "topic_name", "")),
        tenant=str(getattr(request, "tenant", metrics.UNKNOWN)),
    )


class DeletionInterceptor(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """Metrics and span attributes for activities and workflows; ``pool_of`` maps a task queue to a pool."""

    def __init__(self, pool_of: Callable[[str], str]) -> None:
        self._pool_of = pool_of

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return _ActivityInbound(next, self._pool_of)

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        input.unsafe_extern_functions[_EXTERN] = self._finished
        return _WorkflowInbound

    def _finished(
        self,
        context: dict[str, Any],
        decisions: list[dict[str, Any]],
        task_queue: str,
        trace_carrier: dict[str, str] | None,
    ) -> None:
        """Outside the sandbox: count each decided request's outcome under its own tenant and component, and
        put the run's outcome on a span of the run's trace."""
        pool = self._pool_of(task_queue)
        for decided in decisions:
            each = RequestContext(**decided)
            labels = metrics.Labels(pool, each.tenant, each.component)
            metrics.current().request_completed(labels, each.outcome)
        request = RequestContext(**context)
        parent = extract(trace_carrier) if trace_carrier else None
        span = trace.get_tracer(tracing.TRACER_NAME).start_span(
            f"LedgerDeletion:{request.outcome}", context=parent
        )
        tracing.set_request_attributes(
            span,
            ledger_id=request.ledger_id,
            ledger_type=request.ledger_type,
            component=request.component,
            topic=request.topic,
            tenant=request.tenant,
        )
        span.set_attribute(tracing.ATTR_OUTCOME, request.outcome)
        span.end()


class _ActivityInbound(temporalio.worker.ActivityInboundInterceptor):
    def __init__(
        self, next: temporalio.worker.ActivityInboundInterceptor, pool_of: Callable[[str], str]
    ) -> None:
        super().__init__(next)
        self._pool_of = pool_of

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        info = temporalio.activity.info()
        step = info.activity_type
        request = RequestContext.from_headers(input.headers)
        labels = metrics.Labels(self._pool_of(info.task_queue), request.tenant, request.component)
        span = trace.get_current_span()
        if request.ledger_id:
            tracing.set_request_attributes(
                span,
                ledger_id=request.ledger_id,
                ledger_type=request.ledger_type,
                component=request.component,
                topic=request.topic,
                tenant=request.tenant,
            )
        span.set_attribute(tracing.ATTR_STEP, step)
        if request.outcome:
            span.set_attribute(tracing.ATTR_OUTCOME, request.outcome)
        started = time.monotonic()
        recorder = metrics.current()
        try:
            result = await super().execute_activity(input)
        except BaseException as exc:
            recorder.step_finished(labels, step, time.monotonic() - started, ok=False)
            error = str(getattr(exc, "type", None) or type(exc).__name__)
            if step == BK_DELETE:
                recorder.bk_delete_failed(labels, error)
            elif step == OFFLOAD_DELETE:
                recorder.offload_delete_failed(labels, error)
            raise
        recorder.step_finished(labels, step, time.monotonic() - started, ok=True)
        _count_result(recorder, labels, step, result, input.args[0] if input.args else None)
        return result


def _count_result(
    recorder: metrics.Metrics, labels: metrics.Labels, step: str, result: Any, arg: Any
) -> None:
    status = str(getattr(getattr(result, "status", None), "value", ""))
    outcome = str(getattr(getattr(result, "outcome", None), "value", ""))
    if step == BK_DELETE and status == "DELETED":
        recorder.bk_ledger_deleted(labels)
    elif step == OFFLOAD_DELETE and outcome == "DELETED":
        recorder.offloaded_ledger_deleted(labels)
    elif step == ACK:
        recorder.messages_acked(labels, int(getattr(result, "acked", 0)))
    elif step == DEAD_LETTER:
        recorder.dead_lettered(labels, str(getattr(arg, "failed_step", "") or metrics.UNKNOWN))


class _WorkflowInbound(temporalio.worker.WorkflowInboundInterceptor):
    """Runs in the sandbox: only deterministic work here, the rest goes through the extern function."""

    context: RequestContext = RequestContext()

    def init(self, outbound: temporalio.worker.WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound, self))

    async def execute_workflow(self, input: temporalio.worker.ExecuteWorkflowInput) -> Any:
        self.context = context_of_input(input.args[0] if input.args else None)
        result = await super().execute_workflow(input)
        outcome = str(getattr(getattr(result, "outcome", None), "value", ""))
        if outcome and not temporalio.workflow.unsafe.is_replaying():
            info = temporalio.workflow.info()
            carrier = _trace_carrier(info.headers)
            finished = {**self.context.__dict__, "outcome": outcome}
            decisions = _decisions_of(temporalio.workflow.instance()) or [finished]
            temporalio.workflow.extern_functions()[_EXTERN](finished, decisions, info.task_queue, carrier)
        return result

    def current_context(self) -> RequestContext:
        """The request being decided (a joined one while the run decides it, else the run's own), plus the
        run's outcome once it has one (the ack and DLQ steps)."""
        instance = temporalio.workflow.instance()
        context = self.context
        in_decision = getattr(instance, "request_in_decision", None)
        if callable(in_decision) and (request := in_decision()) is not None:
            context = context_of_request(request)
        try:
            outcome = str(getattr(instance.status(), "outcome", "") or "")
        except Exception:  # another workflow type: no status query
            outcome = ""
        if not outcome:
            return context
        return RequestContext(**{**context.__dict__, "outcome": outcome})


def _decisions_of(instance: Any) -> list[dict[str, Any]]:
    """Each request the run decided, as a context with its own outcome; empty for another workflow type."""
    decided = getattr(instance, "decided_requests", None)
    if not callable(decided):
        return []
    return [
        {**context_of_request(request).__dict__, "outcome": str(getattr(outcome, "value", outcome))}
        for request, outcome in decided()
    ]


class _WorkflowOutbound(temporalio.worker.WorkflowOutboundInterceptor):
    def __init__(self, next: temporalio.worker.WorkflowOutboundInterceptor, root: _WorkflowInbound) -> None:
        super().__init__(next)
        self._root = root

    def start_activity(
        self, input: temporalio.worker.StartActivityInput
    ) -> temporalio.workflow.ActivityHandle[Any]:
        input.headers = {**input.headers, HEADER: self._root.current_context().to_payload()}
        return super().start_activity(input)

    def start_local_activity(
        self, input: temporalio.worker.StartLocalActivityInput
    ) -> temporalio.workflow.ActivityHandle[Any]:
        # The read-only checks run as local activities: labelled like the others.
        input.headers = {**input.headers, HEADER: self._root.current_context().to_payload()}
        return super().start_local_activity(input)

    def continue_as_new(self, input: temporalio.worker.ContinueAsNewInput) -> NoReturn:
        super().continue_as_new(input)


def _trace_carrier(headers: Mapping[str, temporalio.api.common.v1.Payload]) -> dict[str, str] | None:
    payload = headers.get(TRACE_HEADER)
    if payload is None:
        return None
    try:
        carrier = _converter.from_payloads([payload], [dict])[0]
        return {str(k): str(v) for k, v in carrier.items()}
    except Exception:
        return None
