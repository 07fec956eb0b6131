"""The ingest loop replaces a consumer that has gone quiet, and never one that holds a message.

A broker can stop feeding a consumer while the backlog waits (pulsar-lite does it part-way through large
backlogs; see docs/reliability.md): after ``resubscribe_idle_seconds`` without a message the loop closes its
consumer and subscribes a fresh one. A message can only be acked through the consumer that delivered it, so
a consumer holding one is kept. Real Pulsar messages, a real workflow start.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pulsar
import pytest
from temporalio.client import Client

from ledger_deletion.adapters import messaging
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.integration.ingest_loop import unpolled_ingestor
from tests.support import eventually

pytestmark = pytest.mark.stack


async def test_quiet_consumer_is_replaced_once_it_holds_nothing(
    settings: Settings, temporal_client: Client, new_ledger_id
) -> None:
    topic = f"{settings.topic}-resubscribe-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))

    def subscribe() -> Any:
        return client.subscribe(
            topic,
            "resubscribe",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    first = subscribe()
    pending = messaging.PendingAcks()
    # No worker polls its workflow queue: the request's workflow starts and stays running, its message held.
    ingestor = unpolled_ingestor(
        settings,
        temporal_client,
        client,
        topic,
        first,
        pending,
        resubscribe=subscribe,
        resubscribe_idle_seconds=1.0,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(ingestor.run(stop))
    producer = client.create_producer(topic, batching_enabled=False)
    request = PendingDeleteLedgerInfo(
        "resubscribe/ns/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, new_ledger_id()
    )
    try:
        producer.send(encode_request(request))

        def handed_off() -> None:
            assert ingestor.stats.started_or_joined == 1

        await eventually(handed_off)
        await asyncio.sleep(3.0)  # three idle periods, holding the message: the consumer is kept
        assert ingestor.stats.resubscribed == 0 and ingestor.consumer is first and len(pending) == 1

        # The workflow's ack, through the consumer that delivered the message.
        [key] = [k for k, _ in pending.bound_before(float("inf"))]
        assert pending.ack([key]) == (1, 0)

        def replaced() -> None:
            assert ingestor.stats.resubscribed >= 1 and ingestor.consumer is not first

        await eventually(replaced)
        assert not first.is_connected()  # closed, not left holding dispatch permits

        # New messages arrive through the fresh consumer (this one is undecodable: DLQ, then acked).
        producer.send(b"\x00not a request")

        def dead_lettered() -> None:
            assert ingestor.stats.dead_lettered == 1

        await eventually(dead_lettered)
    finally:
        stop.set()
        await running
        ingestor.close_consumer()
        await temporal_client.get_workflow_handle(request.workflow_id).terminate("test cleanup")
    # Both messages were acked: a new consumer on the subscription gets nothing.
    probe = subscribe()
    with pytest.raises(pulsar.Timeout):
        probe.receive(timeout_millis=2000)
    client.close()
