"""An ingest loop on topics of its own, with its dead-letter topic read back, for the ingest's tests: real
Pulsar messages through the real consumer, real Temporal dev server (no worker polls the workflow queue, so a
started run stays running)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pulsar
from temporalio.client import Client
from temporalio.service import RPCError

from ledger_deletion.adapters import messaging
from ledger_deletion.policy import deletion_policy
from ledger_deletion.settings import Settings
from workers.ingest import Ingestor
from workers.topics import consumer_options

L = TypeVar("L", bound="Loop")


def unpolled_ingestor(
    settings: Settings,
    temporal: Client,
    client: Any,
    topic: str,
    consumer: Any,
    pending: messaging.PendingAcks,
    *,
    workflow_queue: str = "",
    **options: Any,
) -> Ingestor:
    """An ingest of ``topic`` (its system topic; dead letters to ``<topic>-DLQ``) whose acks go to a queue no
    worker polls, and whose runs start on ``workflow_queue``: by default one no worker polls either, so a
    started run stays running. ``options``: the Ingestor's other fields."""
    return Ingestor(
        temporal,
        consumer,
        pending,
        messaging.Publisher(client, f"{topic}-DLQ"),
        deletion_policy(settings),
        workflow_queue or f"idle-{uuid.uuid4().hex[:6]}",
        ack_queue=f"nobody-{uuid.uuid4().hex[:6]}",
        system_topic=topic,
        **options,
    )


@dataclass
class Loop:
    """An ingest loop on a topic of its own, with its dead-letter topic read back."""

    settings: Settings
    temporal: Client
    client: Any
    topic: str = field(default_factory=lambda: f"ingest-dlq-{uuid.uuid4().hex[:6]}")
    ingestor: Ingestor | None = None
    workflow_ids: list[str] = field(default_factory=list)
    _dlq: Any = None
    _producers: dict[str, Any] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    @property
    def full_topic(self) -> str:
        return f"{self.settings.topic}-{self.topic}"

    def topics(self) -> list[str]:
        """What the loop consumes: its own topic, the system topic of its ingest."""
        return [self.full_topic]

    def subscribe(self) -> Any:
        """A consumer as the product subscribes one (also the probe of :meth:`assert_nothing_unacked`: with
        the client's default crypto failure action it would not see an encrypted message left unacked)."""
        return self.client.subscribe(self.topics(), "ingest", **consumer_options(receiver_queue_size=1000))

    def start(self, wrap: Any = None, resubscribe_idle_seconds: float = 0.0) -> Ingestor:
        # Shared, as the dead-letter topic's replay subscription is: on an Exclusive or Failover subscription
        # pulsar-lite delivers a chunked message's chunks so that the client discards them ("chunk id is
        # invalid"), and a chunked dead letter would never be read back.
        self._dlq = self.client.subscribe(
            f"{self.full_topic}-DLQ",
            "read-back",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        consumer = self.subscribe()
        self.ingestor = unpolled_ingestor(
            self.settings,
            self.temporal,
            self.client,
            self.full_topic,
            wrap(consumer) if wrap else consumer,
            messaging.PendingAcks(),
            resubscribe=self.subscribe if resubscribe_idle_seconds else None,
            resubscribe_idle_seconds=resubscribe_idle_seconds,
        )
        self._task = asyncio.create_task(self.ingestor.run(self._stop))
        return self.ingestor

    def send(self, payload: bytes, topic: str = "") -> None:
        """Publish to ``topic`` (default: the loop's own)."""
        topic = topic or self.full_topic
        if topic not in self._producers:
            self._producers[topic] = self.client.create_producer(topic, batching_enabled=False)
        self._producers[topic].send(payload)

    async def dead_letter(self, timeout_seconds: float = 30.0) -> Any:
        letter = await asyncio.to_thread(self._dlq.receive, int(timeout_seconds * 1000))
        self._dlq.acknowledge(letter)
        return letter

    async def stop(self) -> None:
        if self._task is not None and self.ingestor is not None:
            self._stop.set()
            task, self._task = self._task, None
            # The loop waits for its hand-offs: one that never ends must fail the test, not hang it.
            await asyncio.wait_for(task, timeout=30)
            self.ingestor.close_consumer()

    async def assert_nothing_unacked(self) -> None:
        """Once the loop is gone, a new consumer on the subscription gets nothing: every message was acked."""
        assert await self.unacked() == []

    async def unacked(self) -> list[bytes]:
        """Stops the loop; the payloads a new consumer on the subscription then gets (none acks them)."""
        await self.stop()
        probe = self.subscribe()
        payloads: list[bytes] = []
        try:
            while True:
                payloads.append((await asyncio.to_thread(probe.receive, 2000)).data())
        except pulsar.Timeout:
            return payloads
        finally:
            probe.close()


@asynccontextmanager
async def running_loop(kind: type[L], settings: Settings, temporal_client: Client) -> AsyncIterator[L]:
    """A loop of ``kind``; at the end it is stopped, the runs it started are ended, its client closed."""
    client = pulsar.Client(settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    made = kind(settings, temporal_client, client)
    try:
        yield made
    finally:
        await made.stop()
        for workflow_id in made.workflow_ids:
            with contextlib.suppress(RPCError):  # never started, or already closed
                await temporal_client.get_workflow_handle(workflow_id).terminate("test cleanup")
        client.close()
