"""Topics the pulsar pool consumes: the system deletion topic plus per-namespace ones (tenant isolation).

PIP-186 has one system topic; its mailing-list discussion asks that a tenant's deletions not
share a topic with everyone else's. We consume both: explicit per-namespace topics join the system topic in
one multi-topic consumer, and regex patterns (Pulsar scopes each to one namespace) get a consumer each. The
ingest loop sees one consumer either way.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from typing import Any

import pulsar

from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import Settings
from ledger_deletion.tenancy import tenant_topics, topic_patterns

PATTERN_DISCOVERY_SECONDS = 60


def consumer_options(*, receiver_queue_size: int) -> dict[str, Any]:
    """How the ingest subscribes to a deletion topic: Shared, from the earliest, undecryptable ones too.

    Anyone allowed to publish to a deletion topic can encrypt end to end, and this service holds no private
    key. With the client's default (FAIL) such a message is never handed to the application: it would stay
    unacked on the subscription for ever. CONSUME hands it over still encrypted, with its encryption context,
    and the ingest dead-letters it unread (failed step ``decrypt``, workers/ingest.py).
    """
    return {
        "consumer_type": pulsar.ConsumerType.Shared,
        "initial_position": pulsar.InitialPosition.Earliest,
        "receiver_queue_size": receiver_queue_size,
        "crypto_failure_action": pulsar.ConsumerCryptoFailureAction.CONSUME,
    }


def subscribe_all(client: pulsar.Client, settings: Settings, receiver_queue_size: int) -> Any:
    """One consumer over every deletion topic of the settings (:func:`consumer_options`)."""
    options = consumer_options(receiver_queue_size=receiver_queue_size)
    topics = [settings.topic, *tenant_topics(settings)]
    subscription = settings.ingest_subscription
    consumers = [client.subscribe(topics if len(topics) > 1 else topics[0], subscription, **options)]
    for pattern in topic_patterns(settings):
        try:
            consumers.append(
                client.subscribe(
                    re.compile(pattern),
                    subscription,
                    pattern_auto_discovery_period=PATTERN_DISCOVERY_SECONDS,
                    **options,
                )
            )
        except Exception as exc:  # the client raises its own unexported error classes
            for consumer in consumers:
                with contextlib.suppress(Exception):
                    consumer.close()
            raise ConfigurationError(
                f"pattern subscription {pattern!r} failed ({type(exc).__name__}): the broker must list a "
                "namespace's topics for pattern subscriptions (pulsar-lite cannot); name the topics in "
                "LEDGER_DELETION_TENANT_TOPICS instead"
            ) from exc
    return consumers[0] if len(consumers) == 1 else CompositeConsumer(consumers)


def keep_live_subscription(client: pulsar.Client, settings: Settings) -> None:
    """Make sure the live subscription exists on the named deletion topics, without reading from it.

    A shadow deployment reads on a subscription of its own; the live one must exist meanwhile, or the
    broker keeps nothing for it and a live deployment started later would find only what came after it.
    Subscribing creates a durable subscription (from the earliest message); closing at once acks nothing,
    and whatever the broker had sent the consumer goes back to the subscription. Topics matched by
    patterns are not named here: their live subscription is made by the first live process.
    """
    topics = [settings.topic, *tenant_topics(settings)]
    options = consumer_options(receiver_queue_size=1)
    consumer = client.subscribe(topics if len(topics) > 1 else topics[0], settings.subscription, **options)
    consumer.close()


class CompositeConsumer:
    """Several consumers behind the consumer calls the ingest makes (receive, acknowledge, nack, close).

    Receives round-robin so no topic starves another; remembers which consumer delivered each message id so
    the ack goes back to it (only the receiving consumer can ack in pulsar-lite and the Python client).
    """

    def __init__(self, consumers: list[Any]) -> None:
        self._consumers = consumers
        self._turn = itertools.cycle(range(len(consumers)))
        self._owner: dict[str, Any] = {}
        self._lock = threading.Lock()

    def receive(self, timeout_millis: int) -> Any:
        share = max(1, timeout_millis // len(self._consumers))
        for _ in range(len(self._consumers)):
            consumer = self._consumers[next(self._turn)]
            try:
                message = consumer.receive(timeout_millis=share)
            except pulsar.Timeout:
                continue
            with self._lock:
                # str(MessageId) holds the ledger id, unique in the cluster, so it is unique across topics.
                self._owner[str(message.message_id())] = consumer
            return message
        raise pulsar.Timeout()

    def acknowledge(self, message_id: Any) -> None:
        with self._lock:
            consumer = self._owner.get(str(message_id))
        if consumer is None:
            raise KeyError("message was not received through this consumer")
        consumer.acknowledge(message_id)
        with self._lock:
            self._owner.pop(str(message_id), None)

    def negative_acknowledge(self, message_id: Any) -> None:
        with self._lock:
            consumer = self._owner.pop(str(message_id), None)
        if consumer is None:
            raise KeyError("message was not received through this consumer")
        consumer.negative_acknowledge(message_id)

    def close(self) -> None:
        for consumer in self._consumers:
            # Close the others even if one broker connection is already gone.
            with contextlib.suppress(Exception):
                consumer.close()
