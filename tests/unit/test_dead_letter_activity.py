"""The workflow's dead letter: what the ``publish_dead_letter`` activity writes, and what a sender cannot."""

from __future__ import annotations

from temporalio.testing import ActivityEnvironment

from activities.messaging import MessagingActivities
from ledger_deletion.adapters.messaging import PendingAcks
from ledger_deletion.contracts import DeadLetterInput
from ledger_deletion.formats.avro import decode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo


class RecordingPublisher:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict[str, str]]] = []

    def send(self, payload: bytes, properties: dict[str, str] | None = None) -> str:
        self.sent.append((payload, dict(properties or {})))
        return "(1,1,-1,-1)"


def test_a_senders_properties_cannot_plant_where_a_replay_goes() -> None:
    planted = {
        "ledger-deletion.origin-topic": "persistent://pulsar/system/__ledger_deletion",
        "ledger-deletion.reason": "planted",
        "traceparent": "00-x",
    }
    request = PendingDeleteLedgerInfo(
        "acme/orders/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7, properties=planted
    )
    publisher = RecordingPublisher()
    activities = MessagingActivities(PendingAcks(), publisher)  # type: ignore[arg-type]
    inp = DeadLetterInput(request, "ZooKeeper down", "delete_bk_ledger", 4, "ledger-deletion/LEDGER/7")

    ActivityEnvironment().run(activities.publish_dead_letter, inp)

    [(payload, properties)] = publisher.sent
    assert decode_request(payload) == request  # the request itself is dead-lettered unchanged
    assert "ledger-deletion.origin-topic" not in properties
    assert properties["ledger-deletion.reason"] == "ZooKeeper down"
    assert properties["traceparent"] == "00-x"
