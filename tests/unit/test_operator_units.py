"""Unit checks of operator-side pieces that need no stack: topic wiring, queries, redaction, tracing env."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from typing import Any

import pulsar
import pytest

from ledger_deletion.formats.avro import decode_request, encode_request
from ledger_deletion.observability import redaction, tracing
from ledger_deletion.observability.interceptor import RequestContext, context_of_input
from ledger_deletion.observability.setup import interceptors, pool_resolver
from ledger_deletion.ops.deletions import visibility_query
from ledger_deletion.ops.dlq import (
    ORIGIN_TOPIC,
    REPLAY_COUNT,
    REPLAYED_FROM,
    DeadLetter,
    ReplayReport,
    dead_letter_of,
    replay_payload,
    replay_properties,
)
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.tenancy import tenant_of_topic, tenant_topics, topic_patterns
from workers.topics import CompositeConsumer, subscribe_all


class FakeMessage:
    def __init__(self, mid: str) -> None:
        self._mid = mid

    def message_id(self) -> str:
        return self._mid


class FakeConsumer:
    def __init__(self, messages: list[str]) -> None:
        self.messages = [FakeMessage(m) for m in messages]
        self.acked: list[str] = []

    def receive(self, timeout_millis: int) -> FakeMessage:
        if not self.messages:
            raise pulsar.Timeout()
        return self.messages.pop(0)

    def acknowledge(self, message_id: str) -> None:
        self.acked.append(message_id)

    def close(self) -> None:
        pass


class FakeClient:
    def __init__(self) -> None:
        self.subscriptions: list[tuple[Any, str, dict[str, Any]]] = []

    def subscribe(self, topic: Any, subscription: str, **options: Any) -> FakeConsumer:
        self.subscriptions.append((topic, subscription, options))
        return FakeConsumer([])


def test_system_topic_alone_is_one_plain_consumer() -> None:
    client = FakeClient()
    consumer = subscribe_all(client, Settings(), 100)
    assert isinstance(consumer, FakeConsumer)
    assert client.subscriptions[0][0] == Settings().topic


def test_tenant_topics_join_the_system_topic_and_patterns_get_their_own_consumer() -> None:
    settings = Settings(
        tenant_topics=" persistent://a/ns/__ledger_deletion, persistent://b/ns/__ledger_deletion ,",
        topic_pattern="persistent://c/ns1/__ledger_deletion.* persistent://c/ns2/__ledger_deletion.*",
    )
    client = FakeClient()
    consumer = subscribe_all(client, settings, 100)
    assert isinstance(consumer, CompositeConsumer)
    topics = [s[0] for s in client.subscriptions]
    assert topics[0] == [
        settings.topic,
        "persistent://a/ns/__ledger_deletion",
        "persistent://b/ns/__ledger_deletion",
    ]
    assert [t.pattern for t in topics[1:]] == topic_patterns(settings)
    assert all(isinstance(t, re.Pattern) for t in topics[1:])
    assert {s[1] for s in client.subscriptions} == {settings.subscription}  # one Shared subscription
    assert all(s[2]["consumer_type"] == pulsar.ConsumerType.Shared for s in client.subscriptions)


def test_composite_consumer_acks_through_the_consumer_that_received() -> None:
    first, second = FakeConsumer(["(1,0,-1,-1)"]), FakeConsumer(["(2,0,-1,-1)", "(3,0,-1,-1)"])
    composite = CompositeConsumer([first, second])
    received = [composite.receive(100).message_id() for _ in range(3)]
    assert sorted(received) == ["(1,0,-1,-1)", "(2,0,-1,-1)", "(3,0,-1,-1)"]
    with pytest.raises(pulsar.Timeout):
        composite.receive(100)
    for mid in received:
        composite.acknowledge(mid)
    assert first.acked == ["(1,0,-1,-1)"] and sorted(second.acked) == ["(2,0,-1,-1)", "(3,0,-1,-1)"]
    with pytest.raises(KeyError):
        composite.acknowledge("(9,9,-1,-1)")


def test_tenancy_helpers() -> None:
    settings = Settings(tenant_topics=f"{Settings().topic},persistent://t/ns/x")
    assert tenant_topics(settings) == ["persistent://t/ns/x"]  # the system topic is not listed twice
    assert tenant_of_topic("persistent://acme/ns/x") == "acme" and tenant_of_topic("acme/ns/x") == "acme"


def test_visibility_query_quotes_values() -> None:
    query = visibility_query(outcome="deleted", topic='a"b', tenant="t", running=True, ledger_id=5)
    assert query == (
        'WorkflowType = "LedgerDeletionWorkflow" AND DeletionOutcome = "DELETED" AND PulsarTopic = "a\\"b" '
        'AND PulsarTenant = "t" AND ExecutionStatus = "Running" AND LedgerId = 5'
    )


def test_replay_keeps_original_properties_and_drops_the_diagnosis() -> None:
    letter = DeadLetter(
        message_id="(7,1,-1,-1)",
        published_ms=0,
        reason="boom",
        failed_step="delete_bk_ledger",
        attempts=3,
        workflow_id="w",
        ledger_id=7,
        ledger_type="LEDGER",
        topic="t/n/x",
        tenant="t",
        properties={"traceparent": "00-x", "ledger-deletion.reason": "boom", REPLAY_COUNT: "1"},
    )
    assert replay_properties(letter) == {
        "traceparent": "00-x",
        REPLAYED_FROM: "(7,1,-1,-1)",
        REPLAY_COUNT: "2",
    }


class DeadLetterMessage:
    """A dead-letter entry as the replay reads it."""

    def __init__(self, properties: dict[str, str]) -> None:
        self._properties = properties

    def properties(self) -> dict[str, str]:
        return self._properties

    def data(self) -> bytes:
        return b"not a request"

    def message_id(self) -> str:
        return "(9,1,-1,-1)"

    def publish_timestamp(self) -> int:
        return 0


def test_replay_sends_an_entry_back_to_the_topic_it_came_from() -> None:
    system = "persistent://pulsar/system/__ledger_deletion"
    tenant = "persistent://acme/orders/__ledger_deletion"
    from_tenant = dead_letter_of(
        DeadLetterMessage({ORIGIN_TOPIC: f"{tenant}-partition-1", "ledger-deletion.failed-step": "tenant"})
    )
    unrecorded = dead_letter_of(DeadLetterMessage({"ledger-deletion.reason": "old entry"}))
    # Read from a partition, sent back to its partitioned topic (the producer picks the partition).
    assert from_tenant.origin_topic == f"{tenant}-partition-1" and from_tenant.replay_topic(system) == tenant
    assert unrecorded.origin_topic == "" and unrecorded.replay_topic(system) == system
    # Re-published without our diagnosis: the ingest records the origin again when it dead-letters anew.
    assert ORIGIN_TOPIC not in replay_properties(from_tenant)

    report = ReplayReport(replayed=[from_tenant, unrecorded, from_tenant], system_topic=system)
    assert report.destinations() == {tenant: 2, system: 1}
    assert [e["replay_topic"] for e in report.as_json()["replayed"]] == [tenant, system, tenant]


def test_an_undecrypted_entry_is_never_replayed() -> None:
    """Its payload is ciphertext: only whoever holds the private key can turn it back into a request."""
    undecrypted = dead_letter_of(DeadLetterMessage({"ledger-deletion.failed-step": "decrypt"}))
    decoded = dead_letter_of(DeadLetterMessage({"ledger-deletion.failed-step": "decode"}))
    assert "private key" in undecrypted.refusal() and decoded.refusal() == ""


def test_an_origin_the_workflow_did_not_write_is_not_trusted() -> None:
    """An entry the ingest did not dead-letter carries whatever properties its sender wrote: an origin topic
    there may have been planted. Only the ingest's own steps set it themselves."""
    system = "persistent://pulsar/system/__ledger_deletion"
    planted = dead_letter_of(
        DeadLetterMessage(
            {ORIGIN_TOPIC: "persistent://victim/ns/t", "ledger-deletion.failed-step": "delete_bk_ledger"}
        )
    )
    assert planted.origin_topic == "" and planted.replay_topic(system) == system


def test_a_replayed_request_always_gets_the_in_use_check() -> None:
    """A replay may land on the system topic, trusted to skip the check: an old entry of a namespace's topic
    must not skip the owner's answer there."""
    skipping = PendingDeleteLedgerInfo(
        "globex/payments/t-partition-0", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7
    )
    skipping = replace(skipping, check_ledger_still_in_use=False)
    replayed = decode_request(replay_payload(encode_request(skipping)))
    assert replayed == replace(skipping, check_ledger_still_in_use=True)
    checked = encode_request(replayed)
    assert replay_payload(checked) == checked
    assert replay_payload(b"\x00 not a request") == b"\x00 not a request"


def test_redaction_masks_every_secret_value_in_any_log_record(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from pydantic import SecretStr

    settings = Settings(pulsar_token=SecretStr("tok-abcdef"), zookeeper_digest=SecretStr("user:pa55word"))
    assert sorted(redaction.secret_values(settings)) == ["pa55word", "tok-abcdef", "user:pa55word"]
    redaction.install(settings)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("kazoo.client").debug("Auth(scheme=%r, auth=%r)", "digest", "user:pa55word")
        logging.getLogger("x").info("token tok-abcdef and pa55word")
    assert [r.getMessage() for r in caplog.records] == [
        "Auth(scheme='digest', auth='***')",
        "token *** and ***",
    ]


def test_otlp_export_follows_the_standard_variables() -> None:
    assert not tracing.otlp_requested({})
    assert tracing.otlp_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317"})
    assert tracing.otlp_requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4317"})
    assert not tracing.otlp_requested(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4317", "OTEL_TRACES_EXPORTER": "none"}
    )


def test_request_context_header_round_trip_and_pool_names() -> None:
    context = RequestContext(1, "LEDGER", "MANAGED_LEDGER", "t/n/x", "t", "DELETED")
    header = {"ledger-deletion-request": context.to_payload()}
    assert RequestContext.from_headers(header) == context
    assert RequestContext.from_headers({}) == RequestContext()
    assert context_of_input(object()) == RequestContext()
    settings = Settings(task_queue_prefix="p")
    pool_of = pool_resolver(settings)
    assert [
        pool_of(q) for q in ("p-workflow", "p-bookkeeper", "p-offload", "p-pulsar", "p-pulsar-ack-h-1-x")
    ] == [
        "workflow",
        "bookkeeper",
        "offload",
        "pulsar",
        "pulsar",
    ]
    assert pool_of("other") == "unknown"


def test_otlp_exporter_is_built_from_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    exporter = tracing._otlp_exporter({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"})
    assert isinstance(exporter, OTLPSpanExporter)
    exporter.shutdown()


def test_a_pattern_the_broker_cannot_serve_is_a_clear_configuration_error() -> None:
    from ledger_deletion.errors import ConfigurationError

    class NoPatterns(FakeClient):
        def subscribe(self, topic: Any, subscription: str, **options: Any) -> FakeConsumer:
            if isinstance(topic, re.Pattern):
                raise RuntimeError("LookupError")
            return super().subscribe(topic, subscription, **options)

    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_TENANT_TOPICS"):
        subscribe_all(NoPatterns(), Settings(topic_pattern="persistent://a/b/x.*"), 10)


def test_no_tracing_work_when_spans_go_nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from temporalio.contrib.opentelemetry import TracingInterceptor

    monkeypatch.setattr(tracing, "_installed", None)
    assert tracing.install("unit", env={}) is None
    assert not tracing.installed()
    settings = Settings()
    assert not any(isinstance(i, TracingInterceptor) for i in interceptors(settings, traced=False))
    assert any(isinstance(i, TracingInterceptor) for i in interceptors(settings, traced=True))


async def test_colocated_pools_share_one_queue_and_refuse_a_partial_process() -> None:
    from ledger_deletion.errors import ConfigurationError
    from workers.pools import run_pools

    colocated = Settings(colocate_pools=True)
    assert {colocated.task_queue(pool) for pool in ("workflow", "pulsar", "bookkeeper", "offload")} == {
        "ledger-deletion-all"
    }
    assert pool_resolver(colocated)("ledger-deletion-all") == "all"
    assert Settings().task_queue("bookkeeper") == "ledger-deletion-bookkeeper"
    with pytest.raises(ConfigurationError, match="--pool all"):
        await run_pools(["bookkeeper"], colocated, asyncio.Event())


@pytest.mark.parametrize(
    ("shape", "waits"),
    [("in_use_then_deleted", ["wait_in_use"]), ("young_then_deleted", ["wait_ledger_age"])],
)
def test_show_names_each_timer_by_the_step_it_waits_in(shape: str, waits: list[str]) -> None:
    """``ledger-deletion show`` reads a recorded run: a timer is the in-use grace or the minimum age."""
    from temporalio.client import WorkflowHistory
    from temporalio.converter import DataConverter

    from ledger_deletion.ops.deletions import _steps_from_history
    from tests.workflow.record_histories import HISTORIES

    history = WorkflowHistory.from_json(shape, (HISTORIES / f"{shape}.json").read_text())
    steps, *_ = _steps_from_history(history.events, DataConverter.default.payload_converter)
    assert [s.step for s in steps if s.state == "fired"] == waits


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (
            "deleted",
            [
                ("check_topic", "completed", 1),
                ("verify_bk_metadata", "completed", 1),
                ("ask_owner_broker", "completed", 1),
                ("delete_bk_ledger", "completed", 1),
                ("ack_messages", "completed", 1),
            ],
        ),
        (
            "check_retried_after_timer",
            [
                ("check_topic", "backing_off", 1),
                ("retry_backoff", "fired", 1),
                ("verify_bk_metadata", "completed", 1),
                ("check_topic", "completed", 2),
                ("ask_owner_broker", "completed", 1),
                ("delete_bk_ledger", "completed", 1),
                ("ack_messages", "completed", 1),
            ],
        ),
    ],
)
def test_show_lists_the_checks_run_as_local_activities(
    shape: str, expected: list[tuple[str, str, int]]
) -> None:
    """The read-only checks leave a marker each, not activity events: ``show`` lists them as steps too."""
    from temporalio.client import WorkflowHistory
    from temporalio.converter import DataConverter

    from ledger_deletion.ops.deletions import _steps_from_history
    from tests.workflow.record_histories import HISTORIES

    history = WorkflowHistory.from_json(shape, (HISTORIES / f"{shape}.json").read_text())
    steps, *_ = _steps_from_history(history.events, DataConverter.default.payload_converter)
    listed = [(s.step, s.state, s.attempts) for s in steps]
    # The first round's two checks run at once: either may be recorded first.
    assert sorted(listed[:2]) == sorted(expected[:2]) and listed[2:] == expected[2:]
    assert all(s.finished is not None and s.seconds is not None for s in steps)
