"""Pulsar binary-protocol side: publishing requests and dead letters, and acking what this process received.

Only the consumer that received a message can ack it here: the Python client's multi-topic consumer rejects
a deserialized MessageId (it lacks the partition's topic), and pulsar-lite ties consumers to connections. So
each process keeps its unacked messages in a :class:`PendingAcks` registry, and the workflow routes acks to
that process's own task queue (see ``MessageRef.ack_queue``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pulsar

from ledger_deletion.adapters.pulsar_security import NO_PULSAR_SECURITY, PulsarSecurity
from ledger_deletion.errors import MessagingUnavailable
from ledger_deletion.request import PendingDeleteLedgerInfo


def connect(
    url: str,
    token: str | None = None,
    *,
    security: PulsarSecurity = NO_PULSAR_SECURITY,
    operation_timeout_seconds: int = 30,
) -> pulsar.Client:
    """A client of ``url`` (``pulsar+ssl://`` for TLS) authenticated by OAuth2, a token, or the TLS client
    certificate, in that order of preference; the certificate is presented in every case (mTLS)."""
    return pulsar.Client(
        url,
        **client_options(token, security),
        operation_timeout_seconds=operation_timeout_seconds,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )


def client_options(token: str | None, security: PulsarSecurity) -> dict[str, Any]:
    """The authentication and TLS keyword arguments of ``pulsar.Client``."""
    auth: Any = None
    if security.oauth2 is not None:
        auth = pulsar.AuthenticationOauth2(json.dumps(security.oauth2.client_params()))
    elif token:
        auth = pulsar.AuthenticationToken(token)
    elif security.cert_file:
        auth = pulsar.AuthenticationTLS(security.cert_file, security.key_file)
    options: dict[str, Any] = {
        "authentication": auth,
        "tls_trust_certs_file_path": security.trust_certs_file or None,
        "tls_validate_hostname": security.validate_hostname,
    }
    if security.cert_file:
        options["tls_certificate_file_path"] = security.cert_file
        options["tls_private_key_file_path"] = security.key_file
    return options


@dataclass
class PendingAcks:
    """Received-but-unacked messages of this process, by ``str(MessageId)``.

    Once a message has been handed to its workflow it is *bound* to it (the workflow id, the request and
    when), so a sweeper can settle messages whose workflow ended without reaching this process's ack queue.
    A message the ingest put in the dead-letter topic is marked *dead-lettered* until its ack succeeds, so
    the sweeper can retry an ack that failed: it has no workflow to ack it.
    """

    _held: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    _bound: dict[str, Handoff] = field(default_factory=dict)
    _dead_lettered: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(self, key: str, consumer: Any, message_id: Any) -> None:
        with self._lock:
            self._held[key] = (consumer, message_id)

    def bind(self, key: str, handoff: Handoff) -> None:
        with self._lock:
            if key in self._held:
                self._bound[key] = handoff

    def mark_dead_lettered(self, key: str) -> None:
        """The message is durable in the dead-letter topic: only its ack is left (no workflow will ack it)."""
        with self._lock:
            if key in self._held:
                self._bound.pop(key, None)
                self._dead_lettered.add(key)

    def dead_lettered(self) -> list[str]:
        """Held messages already in the dead-letter topic whose ack has not succeeded yet."""
        with self._lock:
            return sorted(self._dead_lettered)

    def release(self, key: str) -> None:
        """Give a held message back to Pulsar unacked, when this process cannot settle it.

        Negatively acknowledged, Pulsar redelivers it after its redelivery delay (pulsar-lite only once this
        consumer closes, which the ingest's resubscribe does once it holds nothing).
        """
        with self._lock:
            held = self._held.pop(key, None)
            self._bound.pop(key, None)
            self._dead_lettered.discard(key)
        if held is not None:
            consumer, message_id = held
            # A closed consumer refuses: Pulsar then redelivers everything it had unacked anyway.
            with contextlib.suppress(Exception):
                consumer.negative_acknowledge(message_id)

    def bound_before(self, deadline: float) -> list[tuple[str, Handoff]]:
        """Held messages handed to their workflow before ``deadline`` (a ``time.monotonic()`` value)."""
        with self._lock:
            return [(key, h) for key, h in self._bound.items() if h.since < deadline]

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def ack(self, keys: Iterable[str]) -> tuple[int, int]:
        """Returns (acked, unknown). Unknown ids were acked before (acks are idempotent)."""
        acked = unknown = 0
        for key in keys:
            with self._lock:
                held = self._held.get(key)
            if held is None:
                unknown += 1
                continue
            consumer, message_id = held
            try:
                consumer.acknowledge(message_id)
            except Exception as exc:  # pulsar raises its own non-exported error classes
                raise MessagingUnavailable(f"ack of {key} failed: {type(exc).__name__}: {exc}") from exc
            with self._lock:
                self._held.pop(key, None)
                self._bound.pop(key, None)
                self._dead_lettered.discard(key)
            acked += 1
        return acked, unknown


@dataclass(frozen=True)
class Handoff:
    """A held message's workflow: which one, with what request, since when (monotonic seconds)."""

    workflow_id: str
    request: PendingDeleteLedgerInfo
    since: float
    from_system_topic: bool = False  # the message's MessageRef.from_system_topic, for a new run's ref


# The dead-letter topic's durable subscription, the one `ledger-deletion dlq replay` consumes.
DEAD_LETTER_SUBSCRIPTION = "ledger-deletion-dlq-replay"


def subscribe_from_start(client: pulsar.Client, topic: str, subscription: str) -> Any:
    """A Shared consumer on a durable subscription. Subscribing at Earliest creates the subscription where
    the topic starts, or leaves an existing one (and its unacked entries) where it is."""
    return client.subscribe(
        topic,
        subscription,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )


@dataclass
class Publisher:
    """A lazily created, non-batching, chunking producer on one topic; sends are durable when they return.

    ``kept_for``: a durable subscription created before the first send (then left without consumers). With
    Pulsar's defaults (retention 0, inactive topics deleted when they have no subscription), what is
    published to a topic nobody has subscribed yet can be trimmed, or the whole topic deleted once the
    producer is gone: a dead letter would be lost before anyone replayed it (the gap PIP-124's
    ``initSubscriptionName`` closed for Pulsar's own dead-letter topics).
    """

    client: pulsar.Client
    topic: str
    send_timeout_millis: int = 30_000
    kept_for: str | None = None
    _producer: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def send(self, payload: bytes, properties: dict[str, str] | None = None) -> str:
        try:
            with self._lock:
                if self._producer is None:
                    if self.kept_for:
                        subscribe_from_start(self.client, self.topic, self.kept_for).close()
                    self._producer = self.client.create_producer(
                        self.topic,
                        batching_enabled=False,
                        # A consumer reassembles a chunked message over the broker's maximum message size
                        # (5 MB by default): republished whole, as a dead letter or a replay, it is as large
                        # and cannot go out unchunked. It would fail with MessageTooBig on every retry, and
                        # the ingest, retrying its dead letter, would hold it for ever. Smaller payloads go
                        # out as one message, as before.
                        chunking_enabled=True,
                        send_timeout_millis=self.send_timeout_millis,
                    )
                producer = self._producer
            return str(producer.send(payload, properties=properties or {}))
        except Exception as exc:  # pulsar raises its own non-exported error classes
            raise MessagingUnavailable(
                f"publish to {self.topic} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                try:
                    self._producer.flush()
                    self._producer.close()
                except Exception:  # closing a producer of a dead broker must not mask the real outcome
                    pass
                self._producer = None


def dead_letter_properties(
    *, reason: str, failed_step: str, attempts: int, workflow_id: str, original: dict[str, str] | None = None
) -> dict[str, str]:
    """Properties of a dead letter: what happened, where, how often, and which workflow to look at."""
    properties = dict(original or {})
    properties.update(
        {
            "ledger-deletion.reason": reason[:1000],
            "ledger-deletion.failed-step": failed_step,
            "ledger-deletion.attempts": str(attempts),
            "ledger-deletion.workflow-id": workflow_id,
        }
    )
    return properties
