"""What the ingest loop reports about each received message: a span and PIP-186's "received" counter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span

from ledger_deletion.observability import metrics, tracing
from ledger_deletion.request import PendingDeleteLedgerInfo

POOL = "pulsar"


@dataclass
class ObservedMessage:
    span: Span

    def decoded(self, request: PendingDeleteLedgerInfo) -> None:
        tracing.set_request_attributes(
            self.span,
            ledger_id=request.ledger_id,
            ledger_type=request.ledger_type.value,
            component=request.ledger_component.value,
            topic=request.topic_name,
            tenant=request.tenant,
        )
        metrics.current().request_received(
            metrics.Labels(POOL, request.tenant, request.ledger_component.value)
        )

    def undecodable(self) -> None:
        # Counted as received too: PIP-186's "received" is every message, valid or not.
        labels = metrics.Labels(POOL)
        recorder = metrics.current()
        recorder.request_received(labels)
        recorder.dead_lettered(labels, "decode")
        recorder.messages_acked(labels, 1)  # the ingest acks it once the dead letter is durable
        self.span.set_attribute(tracing.ATTR_OUTCOME, "DEAD_LETTERED")

    def rejected(self, request: PendingDeleteLedgerInfo) -> None:
        """Decoded, but Temporal cannot take it (too large, INVALID_ARGUMENT): the ingest dead-letters it."""
        dead_lettered("start", request)
        self.span.set_attribute(tracing.ATTR_OUTCOME, "DEAD_LETTERED")


def dead_lettered(step: str, request: PendingDeleteLedgerInfo | None = None) -> None:
    """A message the ingest itself sends to the dead-letter topic, then acks (``step``: where it failed)."""
    labels = (
        metrics.Labels(POOL)
        if request is None
        else metrics.Labels(POOL, request.tenant, request.ledger_component.value)
    )
    recorder = metrics.current()
    recorder.dead_lettered(labels, step)
    recorder.messages_acked(labels, 1)


@contextmanager
def observe_receive(message: Any, message_id: str) -> Iterator[ObservedMessage]:
    properties = {str(k): str(v) for k, v in dict(message.properties()).items()}
    with tracing.ingest_span(properties, message.topic_name(), message_id) as span:
        yield ObservedMessage(span)
