"""Every message the ingest loop holds ends acked or in the dead-letter topic, also when the message is valid
but Temporal can never take it, when handling it fails in a way nobody foresaw, or when the ack after its
dead letter fails. Real Pulsar messages through the real consumer, real Temporal dev server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion.contracts import DeletionInput, MessageRef
from ledger_deletion.formats.avro import MAX_PAYLOAD_BYTES, decode_request, encode_record, encode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.integration.ingest_loop import Loop, running_loop
from tests.support import eventually
from workers import ingest

pytestmark = pytest.mark.stack


def oversized_record(ledger_id: int, maps: int = 7) -> dict[str, Any]:
    """A valid request under the Avro payload limit whose JSON encoding is several times larger.

    Each map holds 64 values of 1,000 control characters: 64 KB in Avro, 384 KB in Temporal's JSON, where
    each becomes ``\\u0001``. Seven maps: ~450 KB of Avro, ~2.7 MB of workflow input (over the dev server's
    2 MiB blob limit, under gRPC's 4 MiB message limit).
    """

    def props(tag: str) -> dict[str, str]:
        return {f"{tag}{i:02d}": "\x01" * 1000 for i in range(64)}

    segments = [
        {"uidMsb": 1, "uidLsb": 10 + k, "driverMetadata": {"name": "aws-s3", "properties": props(f"s{k}")}}
        for k in range(maps - 2)
    ]
    return {
        "topicName": "oversized/ns/t",
        "ledgerComponent": "MANAGED_LEDGER",
        "ledgerType": "OFFLOAD_LEDGER",
        "ledgerId": ledger_id,
        "properties": props("p"),
        "context": {
            "ledgerId": ledger_id,
            "offloadContext": {
                "uidMsb": 1,
                "uidLsb": 2,
                "complete": True,
                "driverMetadata": {"name": "aws-s3", "properties": props("d")},
                "offloadSegment": segments,
            },
        },
    }


def small_request(ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo("dlq/ns/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


class FlakyAcks:
    """The real consumer, whose first ``acknowledge`` fails (as on a broker connection that just dropped)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.failed = 0

    def acknowledge(self, message_id: Any) -> None:
        if not self.failed:
            self.failed += 1
            raise RuntimeError("connection dropped")
        self.consumer.acknowledge(message_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


@pytest.fixture
async def loop(settings: Settings, temporal_client: Client) -> AsyncIterator[Loop]:
    async with running_loop(Loop, settings, temporal_client) as made:
        yield made


async def assert_never_started(client: Client, workflow_id: str) -> None:
    with pytest.raises(RPCError) as refused:
        await client.get_workflow_handle(workflow_id).describe()
    assert refused.value.status == RPCStatusCode.NOT_FOUND


async def test_valid_request_too_large_for_temporal_is_dead_lettered_and_acked(
    loop: Loop, temporal_client: Client, new_ledger_id
) -> None:
    ledger_id = new_ledger_id()
    payload = encode_record(oversized_record(ledger_id))
    assert len(payload) < MAX_PAYLOAD_BYTES  # valid: it decodes, so only its size can stop it
    ingestor = loop.start(resubscribe_idle_seconds=1.0)
    loop.send(payload)

    letter = await loop.dead_letter()
    props = letter.properties()
    assert letter.data() == payload
    assert props["ledger-deletion.failed-step"] == "start"
    assert "exceeds" in props["ledger-deletion.reason"] and "too large" in props["ledger-deletion.reason"]
    assert props["ledger-deletion.workflow-id"] == decode_request(payload).workflow_id

    def settled() -> None:
        assert len(ingestor.pending) == 0 and ingestor.stats.dead_lettered == 1
        # Holding nothing again, the loop resubscribes when idle, as it must (it cannot while holding).
        assert ingestor.stats.resubscribed >= 1

    await eventually(settled)
    await assert_never_started(temporal_client, props["ledger-deletion.workflow-id"])
    await loop.assert_nothing_unacked()


async def test_start_refused_with_invalid_argument_is_dead_lettered_and_acked(
    loop: Loop, temporal_client: Client, new_ledger_id, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the ingest's own bound, the request reaches the server, whose blob size limit (2 MiB) refuses
    # it with INVALID_ARGUMENT, as a server configured with a lower limit than the bound would.
    monkeypatch.setattr(ingest, "MAX_WORKFLOW_INPUT_BYTES", 16 * 1024 * 1024, raising=False)
    ledger_id = new_ledger_id()
    payload = encode_record(oversized_record(ledger_id))
    ingestor = loop.start()
    loop.send(payload)

    letter = await loop.dead_letter()
    props = letter.properties()
    assert letter.data() == payload and props["ledger-deletion.failed-step"] == "start"
    assert "INVALID_ARGUMENT" in props["ledger-deletion.reason"]

    def settled() -> None:
        assert len(ingestor.pending) == 0 and ingestor.stats.dead_lettered == 1

    await eventually(settled)
    await assert_never_started(temporal_client, props["ledger-deletion.workflow-id"])
    await loop.assert_nothing_unacked()


async def test_transient_statuses_are_retried_not_dead_lettered(
    loop: Loop, temporal_client: Client, new_ledger_id
) -> None:
    ingestor = loop.start()
    request = small_request(new_ledger_id())
    loop.workflow_ids.append(request.workflow_id)
    # About the server or our setup, not the message: a failover (FAILED_PRECONDITION), an outage, a limit.
    refusals = [
        RPCError("namespace is not active", RPCStatusCode.FAILED_PRECONDITION, b""),
        RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b""),
        RPCError("rate limit", RPCStatusCode.RESOURCE_EXHAUSTED, b""),
    ]
    real = ingestor._hand_over

    async def flaky(req: PendingDeleteLedgerInfo, ref: MessageRef) -> bool:
        if refusals:
            raise refusals.pop(0)
        return await real(req, ref)

    ingestor._hand_over = flaky  # type: ignore[method-assign,assignment]
    await asyncio.wait_for(ingestor._start_or_join(request, MessageRef("9:1:-1", ingestor.ack_queue)), 30)
    assert refusals == [] and ingestor.stats.dead_lettered == 0
    await temporal_client.get_workflow_handle(request.workflow_id).describe()  # started in the end


async def test_unexpected_error_in_the_handler_dead_letters_the_message(
    loop: Loop, new_ledger_id, caplog: pytest.LogCaptureFixture
) -> None:
    ingestor = loop.start()

    async def buggy(request: PendingDeleteLedgerInfo, ref: MessageRef) -> None:
        raise TypeError("a bug nobody foresaw")

    ingestor._start_or_join = buggy  # type: ignore[method-assign]
    payload = encode_request(small_request(new_ledger_id()))
    with caplog.at_level(logging.ERROR, logger="workers.ingest"):
        loop.send(payload)
        letter = await loop.dead_letter()

        def settled() -> None:
            assert len(ingestor.pending) == 0 and ingestor.stats.dead_lettered == 1

        await eventually(settled)
    props = letter.properties()
    assert letter.data() == payload and props["ledger-deletion.failed-step"] == "ingest"
    assert "TypeError: a bug nobody foresaw" in props["ledger-deletion.reason"]
    key = props["ledger-deletion.origin-message-id"]
    assert any(key in r.getMessage() and r.exc_info for r in caplog.records)  # logged with its id
    await loop.assert_nothing_unacked()


async def test_message_is_released_for_redelivery_when_dead_lettering_fails_too(
    loop: Loop, new_ledger_id
) -> None:
    ingestor = loop.start(resubscribe_idle_seconds=1.0)

    async def buggy(request: PendingDeleteLedgerInfo, ref: MessageRef) -> None:
        raise TypeError("a bug nobody foresaw")

    async def broken_dead_letter(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("and another one")

    real_dead_letter = ingestor._dead_letter
    ingestor._start_or_join = buggy  # type: ignore[method-assign]
    ingestor._dead_letter = broken_dead_letter  # type: ignore[method-assign]
    payload = encode_request(small_request(new_ledger_id()))
    loop.send(payload)

    def redelivered() -> None:
        # Not held: released, so the idle loop replaces its consumer and the message comes back.
        assert ingestor.stats.received >= 2 and ingestor.stats.resubscribed >= 1

    await eventually(redelivered)
    ingestor._dead_letter = real_dead_letter  # type: ignore[method-assign]
    letter = await loop.dead_letter()  # the next delivery ends where it must
    assert letter.data() == payload and letter.properties()["ledger-deletion.failed-step"] == "ingest"

    def settled() -> None:
        assert len(ingestor.pending) == 0 and ingestor.stats.dead_lettered == 1

    await eventually(settled)
    await loop.assert_nothing_unacked()


async def test_failed_ack_after_dead_letter_is_settled_by_the_sweeper(loop: Loop) -> None:
    ingestor = loop.start(wrap=FlakyAcks)
    loop.send(b"\x00not a request")
    letter = await loop.dead_letter()
    assert letter.properties()["ledger-deletion.failed-step"] == "decode"
    # The writer's schema version, for decoding the payload later: none here (a producer without schema).
    # pulsar-lite sets none for an AVRO producer either, so a non-empty version is not tested here.
    assert letter.properties()["ledger-deletion.origin-schema-version"] == ""

    def dead_lettered_but_held() -> None:
        assert ingestor.stats.dead_lettered == 1 and len(ingestor.pending) == 1

    await eventually(dead_lettered_but_held)
    assert ingestor.pending.bound_before(float("inf")) == []  # no workflow will ever ack it
    assert await ingestor.sweep(held_for=3600) == 1
    assert len(ingestor.pending) == 0
    await loop.assert_nothing_unacked()


async def test_sweeper_dead_letters_a_request_temporal_now_refuses(
    loop: Loop, temporal_client: Client, new_ledger_id, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingestor = loop.start()
    request = small_request(new_ledger_id())
    loop.workflow_ids.append(request.workflow_id)
    loop.send(encode_request(request))

    def handed_off() -> None:
        assert ingestor.stats.started_or_joined == 1

    await eventually(handed_off)
    [(key, handoff)] = ingestor.pending.bound_before(float("inf"))
    await temporal_client.get_workflow_handle(request.workflow_id).terminate("operator")
    # Taken once, refused now (as after a server's size limit was lowered): the restart cannot happen.
    monkeypatch.setattr(ingest, "MAX_WORKFLOW_INPUT_BYTES", 100, raising=False)
    assert await ingestor.sweep(held_for=-1) == 1

    letter = await loop.dead_letter()
    props = letter.properties()
    assert letter.data() == encode_request(request) and props["ledger-deletion.failed-step"] == "start"
    assert (
        props["ledger-deletion.origin-message-id"] == key and "exceeds 100" in props["ledger-deletion.reason"]
    )
    assert len(ingestor.pending) == 0
    await loop.assert_nothing_unacked()


async def test_real_requests_are_far_within_the_bound(
    loop: Loop, temporal_client: Client, new_ledger_id
) -> None:
    """64 properties of 1,000 ASCII characters (the most a request's own map holds) still start."""
    ingestor = loop.start()
    request = PendingDeleteLedgerInfo(
        "dlq/ns/t",
        LedgerComponent.MANAGED_LEDGER,
        LedgerType.LEDGER,
        new_ledger_id(),
        properties={f"k{i:02d}": "v" * 1000 for i in range(64)},
    )
    loop.workflow_ids.append(request.workflow_id)
    await asyncio.wait_for(ingestor._start_or_join(request, MessageRef("9:2:-1", ingestor.ack_queue)), 30)
    history = await temporal_client.get_workflow_handle(request.workflow_id).fetch_history()
    payloads = list(history.events[0].workflow_execution_started_event_attributes.input.payloads)
    [value] = await temporal_client.data_converter.decode(payloads, [DeletionInput])
    assert value.request == request  # the input the ingest encoded itself decodes as the workflow reads it
