"""Dead letters are kept for `dlq replay` from the first one on: the replay subscription exists before it.

With Pulsar's defaults (retention 0, a topic with no subscription deleted once inactive), what is published
to a topic nobody has subscribed can be trimmed before anyone reads it. The subscription `dlq replay` uses is
created by the dead-letter publisher before its first send, so every dead letter waits in its backlog.

The check: subscribing later at *Latest* attaches to the existing subscription and still receives the dead
letter; had the subscription not existed, Latest would create it after the entry and never deliver it (the
control case shows pulsar-lite behaves that way).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from temporalio.client import Client

from ledger_deletion.adapters import messaging
from ledger_deletion.settings import Settings
from tests.support import eventually, running_pools

pytestmark = pytest.mark.stack


@pytest.fixture
def client(settings: Settings) -> Iterator[Any]:
    client = pulsar.Client(settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield client
    client.close()


def received_at_latest(client: Any, topic: str) -> list[bytes]:
    consumer = client.subscribe(
        topic,
        messaging.DEAD_LETTER_SUBSCRIPTION,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Latest,
    )
    got: list[bytes] = []
    try:
        while True:
            message = consumer.receive(timeout_millis=3000)
            got.append(message.data())
            consumer.acknowledge(message)
    except pulsar.Timeout:
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("kept", [True, False])
def test_the_publisher_creates_the_replay_subscription_before_its_first_send(
    client: Any, settings: Settings, kept: bool
) -> None:
    topic = f"{settings.topic}-kept-{uuid.uuid4().hex[:6]}-DLQ"
    publisher = messaging.Publisher(
        client, topic, kept_for=messaging.DEAD_LETTER_SUBSCRIPTION if kept else None
    )
    publisher.send(b"dead letter")
    publisher.close()
    assert received_at_latest(client, topic) == ([b"dead letter"] if kept else [])


async def test_the_pulsar_pool_keeps_its_dead_letters_for_replay(
    client: Any, settings: Settings, temporal_client: Client
) -> None:
    run = uuid.uuid4().hex[:6]
    # Its own topic and task queues: the session's pools may be running in this process already.
    own = settings.with_overrides(
        topic=f"{settings.topic}-dlq-kept-{run}", task_queue_prefix=f"{settings.task_queue_prefix}-dlq-{run}"
    )
    async with running_pools(own, temporal_client, ("pulsar",)) as running:
        producer = client.create_producer(own.topic)
        producer.send(b"\x00 not a request")  # undecodable: the ingest dead-letters it, then acks it
        producer.close()
        assert running.ingestor is not None
        ingestor = running.ingestor

        def dead_lettered() -> None:
            assert ingestor.stats.dead_lettered == 1

        await eventually(dead_lettered, timeout=20)
    assert received_at_latest(client, own.dead_letter_topic) == [b"\x00 not a request"]


def test_replay_leaves_an_undecrypted_entry_in_the_dlq(client: Any, settings: Settings) -> None:
    """Real Pulsar: an entry the ingest could not decrypt is reported and left for whoever holds the key;
    the other entries replay as usual."""
    from ledger_deletion.formats.avro import encode_request
    from ledger_deletion.ops.dlq import replay
    from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

    own = settings.with_overrides(topic=f"{settings.topic}-replay-{uuid.uuid4().hex[:6]}")
    publisher = messaging.Publisher(
        client, own.dead_letter_topic, kept_for=messaging.DEAD_LETTER_SUBSCRIPTION
    )
    request = PendingDeleteLedgerInfo("replay/ns/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 77)
    publisher.send(
        b"\x8f ciphertext",
        messaging.dead_letter_properties(
            reason="encrypted", failed_step="decrypt", attempts=1, workflow_id=""
        ),
    )
    publisher.send(
        encode_request(request),
        messaging.dead_letter_properties(
            reason="x", failed_step="delete_bk_ledger", attempts=10, workflow_id=request.workflow_id
        ),
    )
    publisher.close()
    arrived = client.subscribe(own.topic, "read-back", initial_position=pulsar.InitialPosition.Earliest)

    report = replay(own, lambda letter: True)
    assert [letter.failed_step for letter in report.replayed] == ["delete_bk_ledger"]
    [(refused, why)] = report.failed
    assert refused.failed_step == "decrypt" and "private key" in why
    assert arrived.receive(timeout_millis=10_000).data() == encode_request(
        request  # a replay always asks for the in-use check; this request already did
    )
    again = replay(own, lambda letter: True, dry_run=True)  # still there, and still refused
    assert [letter.failed_step for letter, _ in again.failed] == ["decrypt"] and not again.selected[1:]
