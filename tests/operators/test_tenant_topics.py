"""Per-namespace deletion topics on the real broker: explicit topics and regex patterns."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import Settings
from workers.topics import subscribe_all

pytestmark = pytest.mark.stack


def _drain(consumer: object, want: int) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []
    for _ in range(want * 10):
        if len(got) == want:
            break
        try:
            message = consumer.receive(timeout_millis=1000)  # type: ignore[attr-defined]
        except pulsar.Timeout:
            continue
        got.append((message.topic_name(), message.data()))
        consumer.acknowledge(message.message_id())  # type: ignore[attr-defined]
    return got


def test_system_topic_and_tenant_topics_share_one_subscription(settings: Settings) -> None:
    run = uuid.uuid4().hex[:8]
    tenant_topic = f"persistent://acme-{run}/orders/__ledger_deletion"
    local = settings.with_overrides(
        topic=f"persistent://pulsar/system/__ld_tenants_{run}", tenant_topics=tenant_topic
    )
    client = pulsar.Client(settings.pulsar_url)
    try:
        for topic, payload in ((local.topic, b"system"), (tenant_topic, b"tenant")):
            client.create_producer(topic, batching_enabled=False).send(payload)
        consumer = subscribe_all(client, local, 100)
        got = _drain(consumer, 2)
        consumer.close()
        assert sorted(data for _, data in got) == [b"system", b"tenant"]
        assert any(name.startswith(tenant_topic) for name, _ in got)
    finally:
        client.close()


def test_topic_pattern_consumes_every_matching_topic_of_the_namespace(settings: Settings) -> None:
    run = uuid.uuid4().hex[:8]
    namespace = f"persistent://acme-{run}/orders"
    local = settings.with_overrides(
        topic=f"persistent://pulsar/system/__ld_pattern_{run}",
        topic_pattern=f"{namespace}/__ledger_deletion.*",
    )
    client = pulsar.Client(settings.pulsar_url)
    try:
        client.create_producer(f"{namespace}/__ledger_deletion-a", batching_enabled=False).send(b"a")
        client.create_producer(f"{namespace}/__ledger_deletion-b", batching_enabled=False).send(b"b")
        try:
            consumer = subscribe_all(client, local, 100)
        except ConfigurationError as exc:
            pytest.skip(f"this broker cannot serve pattern subscriptions (pulsar-lite lacks it): {exc}")
        got = _drain(consumer, 2)
        consumer.close()
        assert sorted(data for _, data in got) == [b"a", b"b"]
    finally:
        client.close()
