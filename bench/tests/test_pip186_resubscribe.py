"""Benchmark B (the PIP-186 consumer baseline) replaces a quiet consumer, as the service's ingest does.

pulsar-lite can stop dispatching to a consumer part-way through a backlog; a baseline without the guard sat
until its one-hour timeout (a full benchmark run hung in B). After ``resubscribe_idle_seconds`` without a
message while it holds none, B subscribes afresh, and what is published afterwards is still handled and acked.
Real Pulsar, ZooKeeper and admin emulator on the session stack.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pulsar
import pytest

from bench.pip186_consumer import Pip186Consumer
from ledger_deletion.contracts import Outcome
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings

pytestmark = pytest.mark.stack


def test_quiet_baseline_consumer_resubscribes_and_still_acks_everything(
    settings: Settings, new_ledger_id: Any
) -> None:
    suffix = uuid.uuid4().hex[:6]
    own = settings.with_overrides(
        topic=f"{settings.topic}-pip186-{suffix}",
        subscription=f"pip186-{suffix}",
        dead_letter_topic=f"{settings.topic}-pip186-{suffix}-DLQ",
    )
    consumer = Pip186Consumer(
        own, reconsume_seconds=1.0, max_reconsume=2, concurrency=4, resubscribe_idle_seconds=1.0
    )
    first = consumer.consumer
    # Ledgers nobody created, on a topic the brokers do not know: each request ends ALREADY_DELETED, acked.
    requests = [
        PendingDeleteLedgerInfo(
            f"pip186-{suffix}/ns/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, new_ledger_id()
        )
        for _ in range(3)
    ]
    runner = threading.Thread(target=consumer.run, args=(len(requests), 60.0))
    runner.start()
    client = pulsar.Client(own.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        deadline = time.monotonic() + 20
        while consumer.resubscribed == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumer.resubscribed >= 1 and consumer.consumer is not first
        assert not first.is_connected()  # closed, not left holding the subscription's dispatch permits

        producer = client.create_producer(own.topic, batching_enabled=False)
        for request in requests:
            producer.send(encode_request(request))
        runner.join(timeout=60)
        assert not runner.is_alive()
        assert consumer.done == len(requests)
        assert consumer.outcomes == {Outcome.ALREADY_DELETED.value: len(requests)}
    finally:
        runner.join(timeout=60)
        consumer.close()
    # Every message was acked through the consumer that received it: the subscription has nothing left.
    probe = client.subscribe(
        own.topic,
        own.subscription,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    with pytest.raises(pulsar.Timeout):
        probe.receive(timeout_millis=2000)
    client.close()
