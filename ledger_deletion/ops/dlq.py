"""The dead-letter topic: look at it without changing it, and replay entries into the deletion topics.

``read_dead_letters`` uses a Reader: it holds no subscription, so looking never acks, moves or redelivers
anything, and it shows every entry the topic still retains, replayed or not. ``replay`` uses a durable
subscription on the dead-letter topic instead, so each entry is replayed at most once: it re-publishes the
original payload, waits until that send is durable (non-batched producer, synchronous send), and only then
acks the dead-letter entry. An entry that is not selected, or whose re-publish fails, stays unacked and is
offered to the next replay. A dry run reads through that subscription too and acks nothing, so it counts
exactly the entries a replay would find.

An entry goes back to the topic it came from (``ledger-deletion.origin-topic``, recorded by the ingest for
what it dead-letters), not to the system topic: the system topic is trusted to name any namespace and to
skip the in-use check, a namespace's own deletion topic is not (``tenancy.confine_to_topic``), so replaying a
tenant's entry to the system topic would launder it. The origin is the partition the message was read from;
the entry is published to its partitioned topic, whose producer picks a partition: a broker that creates
topics on first use (pulsar-lite does) would otherwise make the partition's name a topic of its own, which
nobody consumes. Entries without an origin (the workflow's, which carry the request as the ingest confined
it, and entries from before the origin was recorded) go to the system topic as before.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pulsar

from ledger_deletion import connections
from ledger_deletion.adapters import messaging
from ledger_deletion.errors import InvalidRequestError, LedgerDeletionError
from ledger_deletion.formats.avro import decode_request, encode_request
from ledger_deletion.settings import Settings
from ledger_deletion.tenancy import partitioned_topic

REPLAY_SUBSCRIPTION = messaging.DEAD_LETTER_SUBSCRIPTION  # created by the first dead letter's publisher
READ_TIMEOUT_MILLIS = 1500  # pulsar-lite cannot answer "is there more?" (no getLastMessageId): read to a lull
PROPERTY_PREFIX = "ledger-deletion."
REPLAYED_FROM = "ledger-deletion.replayed-from"
REPLAY_COUNT = "ledger-deletion.replay-count"
ORIGIN_TOPIC = "ledger-deletion.origin-topic"  # set by the ingest (workers/ingest.py, _origin)
# Failed steps of the ingest's own dead letters (workers/ingest.py). Only those set the origin topic
# themselves, over whatever the message carried. An entry from anywhere else is not trusted with an origin:
# its properties came from whoever wrote it, so an origin there may have been planted.
INGEST_STEPS = frozenset({"decode", "decrypt", "tenant", "start", "ingest"})
# An end-to-end encrypted message the ingest could not decrypt: its payload is ciphertext, and re-publishing
# it (without the encryption metadata, which travels in properties) could only fail again, or, now and then,
# decode as some request nobody sent. Someone holding the private key decrypts it and submits the request.
UNDECRYPTED_STEP = "decrypt"


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    published_ms: int
    reason: str
    failed_step: str
    attempts: int
    workflow_id: str
    ledger_id: int | None
    ledger_type: str
    topic: str
    tenant: str
    origin_topic: str = ""  # the deletion topic the message came from; empty: not recorded
    properties: dict[str, str] = field(default_factory=dict)

    def refusal(self) -> str:
        """Why a replay must not re-submit this entry, or "" when it may."""
        if self.failed_step == UNDECRYPTED_STEP:
            return (
                "encrypted end to end, not replayed: decrypt it with the private key (its "
                "ledger-deletion.encryption.* properties) and submit the request"
            )
        return ""

    def replay_topic(self, system_topic: str) -> str:
        """Where a replay re-publishes this entry: its own topic, or the system topic if none is recorded."""
        return partitioned_topic(self.origin_topic) if self.origin_topic else system_topic

    def age_seconds(self, now_ms: int | None = None) -> float:
        return max(0.0, ((now_ms or int(time.time() * 1000)) - self.published_ms) / 1000)

    def as_json(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "published_ms": self.published_ms,
            "age_seconds": round(self.age_seconds(), 1),
            "reason": self.reason,
            "failed_step": self.failed_step,
            "attempts": self.attempts,
            "workflow_id": self.workflow_id,
            "ledger_id": self.ledger_id,
            "ledger_type": self.ledger_type,
            "topic": self.topic,
            "tenant": self.tenant,
            "origin_topic": self.origin_topic,
        }


def dead_letter_of(message: Any) -> DeadLetter:
    properties = {str(k): str(v) for k, v in dict(message.properties()).items()}
    ledger_id: int | None = None
    ledger_type = topic = tenant = ""
    try:
        request = decode_request(message.data())
        ledger_id, ledger_type = request.ledger_id, request.ledger_type.value
        topic, tenant = request.topic_name, request.tenant
    except InvalidRequestError:
        pass  # an undecodable payload is a legitimate dead letter; its reason says why
    attempts = properties.get("ledger-deletion.attempts", "0")
    failed_step = properties.get("ledger-deletion.failed-step", "")
    return DeadLetter(
        message_id=str(message.message_id()),
        published_ms=int(message.publish_timestamp()),
        reason=properties.get("ledger-deletion.reason", ""),
        failed_step=failed_step,
        attempts=int(attempts) if attempts.isdigit() else 0,
        workflow_id=properties.get("ledger-deletion.workflow-id", ""),
        ledger_id=ledger_id,
        ledger_type=ledger_type,
        topic=topic,
        tenant=tenant,
        origin_topic=properties.get(ORIGIN_TOPIC, "") if failed_step in INGEST_STEPS else "",
        properties=properties,
    )


@contextmanager
def _client(settings: Settings) -> Iterator[pulsar.Client]:
    client = connections.pulsar_client(settings)
    try:
        yield client
    finally:
        client.close()


def read_dead_letters(settings: Settings, limit: int = 10_000) -> list[DeadLetter]:
    """Every retained entry of the dead-letter topic, oldest first; acks nothing."""
    letters: list[DeadLetter] = []
    with _client(settings) as client:
        reader = client.create_reader(settings.dead_letter_topic, pulsar.MessageId.earliest)
        try:
            while len(letters) < limit:
                try:
                    message = reader.read_next(timeout_millis=READ_TIMEOUT_MILLIS)
                except pulsar.Timeout:
                    break
                letters.append(dead_letter_of(message))
        finally:
            reader.close()
    return sorted(letters, key=lambda d: d.published_ms)


@dataclass
class ReplayReport:
    selected: list[DeadLetter] = field(default_factory=list)
    replayed: list[DeadLetter] = field(default_factory=list)
    failed: list[tuple[DeadLetter, str]] = field(default_factory=list)
    left: int = 0  # not selected: stays in the dead-letter subscription for a later replay
    dry_run: bool = False
    system_topic: str = ""  # where entries without an origin topic go

    def destinations(self) -> Counter[str]:
        """How many entries went (or, in a dry run, would go) to each topic."""
        letters = self.selected if self.dry_run else self.replayed
        return Counter(d.replay_topic(self.system_topic) for d in letters)

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "selected": len(self.selected),
            "replayed": [self._entry(d) for d in self.replayed],
            "failed": [{**self._entry(d), "error": e} for d, e in self.failed],
            "left_in_dlq": self.left,
            "destinations": dict(self.destinations()),
        }

    def _entry(self, letter: DeadLetter) -> dict[str, Any]:
        return {**letter.as_json(), "replay_topic": letter.replay_topic(self.system_topic)}


def replay_payload(payload: bytes) -> bytes:
    """The payload to re-publish: the request with ``checkLedgerStillInUse`` set.

    A replay comes after a failure and a wait, and may land on the system topic, which is trusted to skip
    the check: an entry dead-lettered before the ingest confined namespace topics (or without a recorded
    origin) could otherwise skip the owner's answer there. Asking the owner never deletes more. A payload
    that does not decode is sent as it was (the ingest dead-letters it again, with the reason).
    """
    try:
        request = decode_request(payload)
    except InvalidRequestError:
        return payload
    if request.check_ledger_still_in_use:
        return payload
    return encode_request(replace(request, check_ledger_still_in_use=True))


def replay_properties(letter: DeadLetter) -> dict[str, str]:
    """Original properties (a traceparent keeps its trace) minus our diagnosis, plus where it came from."""
    kept = {k: v for k, v in letter.properties.items() if not k.startswith(PROPERTY_PREFIX)}
    previous = letter.properties.get(REPLAY_COUNT, "0")
    kept[REPLAYED_FROM] = letter.message_id
    kept[REPLAY_COUNT] = str((int(previous) if previous.isdigit() else 0) + 1)
    return kept


def _receive_to_lull(consumer: Any) -> list[tuple[Any, DeadLetter]]:
    """Every entry the subscription has not acked yet, in the order received.

    Nothing is acked while receiving, so a broker stops at its ``maxUnackedMessagesPerConsumer`` (50,000
    by default for a Shared subscription): a larger backlog is replayed, and counted, in several runs.
    """
    received: list[tuple[Any, DeadLetter]] = []
    while True:
        try:
            message = consumer.receive(timeout_millis=READ_TIMEOUT_MILLIS)
        except pulsar.Timeout:
            return received
        received.append((message, dead_letter_of(message)))


def replay(
    settings: Settings,
    select: Callable[[DeadLetter], bool],
    *,
    dry_run: bool = False,
    on_start: Callable[[int], None] = lambda total: None,
    on_progress: Callable[[DeadLetter], None] = lambda letter: None,
) -> ReplayReport:
    """Re-submit the selected dead letters; see the module docstring for the ack ordering.

    A dry run reads through the same subscription and acks nothing, so it counts what a replay would find:
    the entries not replayed yet. (A Reader sees every retained entry, replayed or not, and would count an
    entry replayed last week again.) Its consumer closes with everything unacked, which hands each entry
    back to the subscription as it was; nothing is published.
    """
    report = ReplayReport(dry_run=dry_run, system_topic=settings.topic)
    with _client(settings) as client:
        # The subscription the pools create before their first dead letter (``Publisher.kept_for``); where
        # none exists yet, this creates it at the topic's start, as the first dead letter would.
        consumer = messaging.subscribe_from_start(client, settings.dead_letter_topic, REPLAY_SUBSCRIPTION)
        # One producer per topic replayed to, made on first use.
        targets: dict[str, messaging.Publisher] = {}
        try:
            received = _receive_to_lull(consumer)
            chosen = [(m, d) for m, d in received if select(d)]
            report.selected = [d for _, d in chosen]
            report.left = len(received) - len(chosen)
            on_start(len(chosen))
            for message, letter in chosen:
                if refusal := letter.refusal():
                    report.failed.append((letter, refusal))  # not acked: it stays in the DLQ
                    on_progress(letter)
                    continue
                if dry_run:
                    on_progress(letter)
                    continue
                topic = letter.replay_topic(settings.topic)
                if topic not in targets:
                    targets[topic] = messaging.Publisher(client, topic)
                try:
                    # Durable when it returns.
                    targets[topic].send(replay_payload(message.data()), replay_properties(letter))
                except LedgerDeletionError as exc:
                    report.failed.append((letter, str(exc)))  # not acked: offered again next time
                else:
                    consumer.acknowledge(message)
                    report.replayed.append(letter)
                on_progress(letter)
        finally:
            for target in targets.values():
                target.close()
            consumer.close()  # unacked entries go back to the subscription
    return report
