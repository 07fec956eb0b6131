"""Tenant isolation in the ingest: a namespace's own deletion topic may name only that namespace and never
skips the in-use check; only the system topic is the broker's. Real Pulsar messages through a real consumer
on both topics, real Temporal dev server (no worker polls the workflow queue: a started run stays there).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pulsar
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion.adapters import messaging
from ledger_deletion.contracts import DeletionInput
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.policy import deletion_policy
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.operators.helpers import eventually
from workers.ingest import Ingestor

pytestmark = pytest.mark.stack


@dataclass
class TenancyLoop:
    """An ingest loop over a system topic and one namespace's deletion topic, both its own."""

    settings: Settings
    temporal: Client
    client: Any
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    workflow_ids: list[str] = field(default_factory=list)
    ingestor: Ingestor | None = None
    _producers: dict[str, Any] = field(default_factory=dict)
    _dlq: Any = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    @property
    def system_topic(self) -> str:
        return f"{self.settings.topic}-tenancy-{self.run}"

    @property
    def tenant_namespace(self) -> str:
        return f"acme-{self.run}/orders"

    @property
    def tenant_topic(self) -> str:
        return f"persistent://{self.tenant_namespace}/__ledger_deletion"

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.system_topic}-DLQ"

    def subscribe(self) -> Any:
        return self.client.subscribe(
            [self.system_topic, self.tenant_topic],
            "ingest",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    def start(self) -> Ingestor:
        self._dlq = self.client.subscribe(
            self.dead_letter_topic, "read-back", initial_position=pulsar.InitialPosition.Earliest
        )
        self.ingestor = Ingestor(
            self.temporal,
            self.subscribe(),
            messaging.PendingAcks(),
            messaging.Publisher(self.client, self.dead_letter_topic),
            deletion_policy(self.settings),
            f"idle-{uuid.uuid4().hex[:6]}",  # no worker polls it: a started run stays running
            ack_queue=f"nobody-{uuid.uuid4().hex[:6]}",
            system_topic=self.system_topic,
        )
        self._task = asyncio.create_task(self.ingestor.run(self._stop))
        return self.ingestor

    def request(self, topic_name: str, ledger_id: int) -> PendingDeleteLedgerInfo:
        """A request that asks to skip the in-use check, as the broker may."""
        made = PendingDeleteLedgerInfo(
            topic_name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id
        )
        made = replace(made, check_ledger_still_in_use=False)
        self.workflow_ids.append(made.workflow_id)
        return made

    def send(self, topic: str, payload: bytes) -> None:
        if topic not in self._producers:
            self._producers[topic] = self.client.create_producer(topic, batching_enabled=False)
        self._producers[topic].send(payload)

    async def dead_letter(self) -> Any:
        letter = await asyncio.to_thread(self._dlq.receive, 30_000)
        self._dlq.acknowledge(letter)
        return letter

    async def stop(self) -> None:
        if self._task is not None and self.ingestor is not None:
            self._stop.set()
            task, self._task = self._task, None
            await asyncio.wait_for(task, timeout=30)
            self.ingestor.close_consumer()


@pytest.fixture
async def loop(settings: Settings, temporal_client: Client) -> AsyncIterator[TenancyLoop]:
    client = pulsar.Client(settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    made = TenancyLoop(settings, temporal_client, client)
    yield made
    await made.stop()
    for workflow_id in made.workflow_ids:
        with contextlib.suppress(RPCError):  # never started, or already closed
            await temporal_client.get_workflow_handle(workflow_id).terminate("test cleanup")
    client.close()


async def started_input(client: Client, workflow_id: str) -> DeletionInput:
    """The input the ingest started the run with, waiting until it has started it."""

    async def history() -> Any:
        return await client.get_workflow_handle(workflow_id).fetch_history()

    found: list[Any] = []

    async def started() -> None:
        try:
            found[:] = [await history()]
        except RPCError as exc:
            raise AssertionError(f"{workflow_id} not started yet: {exc}") from exc

    await eventually(started)
    event = found[0].events[0]
    assert event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    payloads = list(event.workflow_execution_started_event_attributes.input.payloads)
    [value] = await client.data_converter.decode(payloads, [DeletionInput])
    assert isinstance(value, DeletionInput)
    return value


async def test_tenant_topic_request_naming_another_namespace_is_dead_lettered_never_started(
    loop: TenancyLoop, temporal_client: Client, new_ledger_id
) -> None:
    """The attack: a role that may produce on acme's namespace names globex's live ledger, check off."""
    ingestor = loop.start()
    victim = f"globex-{loop.run}/payments"
    forged = loop.request(f"{victim}/ledger-partition-0", new_ledger_id())
    payload = encode_request(forged)
    loop.send(loop.tenant_topic, payload)

    letter = await loop.dead_letter()
    props = letter.properties()
    assert letter.data() == payload  # the payload as sent, for the operator to look at
    assert props["ledger-deletion.failed-step"] == "tenant"
    assert (
        victim in props["ledger-deletion.reason"] and loop.tenant_namespace in props["ledger-deletion.reason"]
    )
    assert props["ledger-deletion.origin-topic"].startswith(loop.tenant_topic)  # where a replay sends it

    def settled() -> None:
        assert ingestor.stats.dead_lettered == 1 and ingestor.stats.started_or_joined == 0
        assert len(ingestor.pending) == 0  # acked once the dead letter was durable

    await eventually(settled)
    with pytest.raises(RPCError) as refused:
        await temporal_client.get_workflow_handle(forged.workflow_id).describe()
    assert refused.value.status == RPCStatusCode.NOT_FOUND


async def test_tenant_topic_request_of_its_own_namespace_always_gets_the_in_use_check(
    loop: TenancyLoop, temporal_client: Client, new_ledger_id
) -> None:
    ingestor = loop.start()
    own = loop.request(f"{loop.tenant_namespace}/ledger-partition-0", new_ledger_id())
    loop.send(loop.tenant_topic, encode_request(own))

    started = await started_input(temporal_client, own.workflow_id)
    assert started.request == replace(own, check_ledger_still_in_use=True)
    first = started.first_message
    assert first is not None and first.check_ledger_still_in_use is True
    assert first.topic.startswith(loop.tenant_topic)
    # What the sweeper would start again, should this run end without a decision: the same, checked.
    [(_, handoff)] = ingestor.pending.bound_before(float("inf"))
    assert handoff.request.check_ledger_still_in_use is True
    assert ingestor.stats.dead_lettered == 0


async def test_system_topic_request_is_taken_as_sent(
    loop: TenancyLoop, temporal_client: Client, new_ledger_id
) -> None:
    """The broker's topic may name any namespace and skip the in-use check (ledgers it already dropped)."""
    ingestor = loop.start()
    sent = loop.request(f"globex-{loop.run}/payments/ledger-partition-0", new_ledger_id())
    loop.send(loop.system_topic, encode_request(sent))

    started = await started_input(temporal_client, sent.workflow_id)
    assert started.request == sent and started.request.check_ledger_still_in_use is False
    first = started.first_message
    assert first is not None and first.check_ledger_still_in_use is False
    assert first.topic.startswith(loop.system_topic)
    assert ingestor.stats.dead_lettered == 0
