"""Activities on the Pulsar binary protocol: ack the messages this process received, publish dead letters."""

from __future__ import annotations

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.messaging import PendingAcks, Publisher, dead_letter_properties
from ledger_deletion.contracts import AckMessagesInput, AckMessagesResult, DeadLetterInput, DeadLetterResult
from ledger_deletion.formats.avro import encode_request

DEAD_LETTER_PROPERTY_PREFIX = "ledger-deletion."  # the dead-letter properties this service writes


class MessagingActivities:
    def __init__(self, pending: PendingAcks, dead_letters: Publisher) -> None:
        self._pending = pending
        self._dead_letters = dead_letters

    @activity.defn(name="ack_messages")
    @translate_errors
    def ack_messages(self, inp: AckMessagesInput) -> AckMessagesResult:
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
