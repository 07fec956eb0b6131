"""Activities on the Pulsar binary protocol: ack the messages this process received, publish dead letters."""

from __future__ import annotations

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.messaging import PendingAcks, Publisher, dead_letter_properties
from ledger_deletion.audit.record import from_note
from ledger_deletion.audit.writer import AuditWriter, written_at
from ledger_deletion.contracts import AckMessagesInput, AckMessagesResult, DeadLetterInput, DeadLetterResult
from ledger_deletion.formats.avro import encode_request

DEAD_LETTER_PROPERTY_PREFIX = "ledger-deletion."  # the dead-letter properties this service writes


class MessagingActivities:
    def __init__(
        self,
        pending: PendingAcks,
        dead_letters: Publisher,
        audit: AuditWriter | None = None,
        worker: str = "",
    ) -> None:
        self._pending = pending
        self._dead_letters = dead_letters
        self._audit = audit
        self._worker = worker

    @activity.defn(name="ack_messages")
    @translate_errors
    def ack_messages(self, inp: AckMessagesInput) -> AckMessagesResult:
        if self._audit is not None and inp.audit:
            # Durable before the ack: a crash in between writes the same records again on the retry (or in
            # the run the redelivered message starts), and readers keep one row per record id.
            info = activity.info()
            now = written_at()
            self._audit.write(
                [
                    from_note(
                        note,
                        workflow_id=info.workflow_id or "",
                        run_id=info.workflow_run_id or "",
                        worker=self._worker,
                        written_at=now,
                    )
                    for note in inp.audit
                ]
            )
        acked, unknown = self._pending.ack(inp.message_ids)
        return AckMessagesResult(acked=acked, unknown=unknown)

    @activity.defn(name="publish_dead_letter")
    @translate_errors
    def publish_dead_letter(self, inp: DeadLetterInput) -> DeadLetterResult:
        properties = dead_letter_properties(
            reason=inp.reason,
            failed_step=inp.failed_step,
            attempts=inp.attempts,
            workflow_id=inp.workflow_id,
            original=_senders_properties(inp.request.properties),
        )
        message_id = self._dead_letters.send(encode_request(inp.request), properties)
        return DeadLetterResult(message_id=message_id)


def _senders_properties(properties: dict[str, str]) -> dict[str, str]:
    """The request's own properties, without keys in our ``ledger-deletion.`` namespace.

    Whoever sent the request wrote its properties; ``dlq replay`` reads ``ledger-deletion.origin-topic`` to
    choose where an entry goes back to, so a sender must not be able to plant it (or any of our keys).
    """
    return {k: v for k, v in properties.items() if not k.startswith(DEAD_LETTER_PROPERTY_PREFIX)}
