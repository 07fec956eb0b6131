"""Metrics and traces after real deletions on the embedded stack (issue items 3 and 4)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from temporalio.service import RPCError

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import DeletionStatus, Outcome
from ledger_deletion.observability import tracing
from ledger_deletion.submit import RequestPublisher
from tests.operators.support import Observed, metric_value, orphan_requests, results_of, scrape
from tests.support import eventually
from workflows.ledger_deletion import STATUS_QUERY

pytestmark = pytest.mark.stack


async def test_metrics_count_real_deletions(
    observed: Observed, observed_publisher: RequestPublisher, cluster: SimulatedCluster
) -> None:
    tenant = f"metrics-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant)  # LEDGER a, LEDGER b, OFFLOAD_LEDGER b
    foreign = cluster.new_ledger_ids(1)[0]
    cluster.add_foreign_ledger(foreign)  # another BookKeeper user's ledger: must be skipped, never deleted
    forged = type(requests[0])(
        topic_name=requests[0].topic_name,
        ledger_component=requests[0].ledger_component,
        ledger_type=requests[0].ledger_type,
        ledger_id=foreign,
        context=requests[0].context,
    )
    for request in [*requests, forged]:
        observed_publisher.publish(request)
    results = await results_of(observed.client, [*requests, forged])
    assert sorted(r.outcome for r in results.values()) == sorted(
        [Outcome.DELETED, Outcome.DELETED, Outcome.DELETED, Outcome.SKIPPED_NOT_PULSAR]
    )

    def counted() -> None:
        text = scrape(observed.metrics_url)
        t = {"tenant": tenant}
        assert metric_value(text, "ledger_deletion_requests_received_total", pool="pulsar", **t) == 4
        assert metric_value(text, "ledger_deletion_bk_ledgers_deleted_total", pool="bookkeeper", **t) == 2
        assert metric_value(text, "ledger_deletion_offloaded_ledgers_deleted_total", pool="offload", **t) == 1
        assert metric_value(text, "ledger_deletion_messages_acked_total", pool="pulsar", **t) == 4
        assert metric_value(text, "ledger_deletion_requests_completed_total", outcome="DELETED", **t) == 3
        assert metric_value(text, "ledger_deletion_skipped_total", reason="SKIPPED_NOT_PULSAR", **t) == 1
        assert metric_value(text, "ledger_deletion_bk_delete_failures_total", **t) == 0
        assert metric_value(text, "ledger_deletion_dead_lettered_total", **t) == 0
        # Step latencies: one histogram sample per activity attempt, labelled with pool and component.
        assert (
            metric_value(
                text,
                "ledger_deletion_step_duration_seconds_count",
                step="delete_bk_ledger",
                pool="bookkeeper",
                component="MANAGED_LEDGER",
                **t,
            )
            == 2
        )

    await eventually(counted)


async def test_a_joined_request_counts_for_its_own_tenant(
    observed: Observed, observed_publisher: RequestPublisher, cluster: SimulatedCluster
) -> None:
    """Another tenant's request naming the same ledger joins the owner's run and is decided on its own: its
    outcome and the steps of its decision count for its tenant, and the deletion for the owner's only."""
    run = uuid.uuid4().hex[:6]
    owner, intruder = f"joined-owner-{run}", f"joined-intruder-{run}"
    topic = f"{owner}/ns/orders"
    ids = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, ids)
    real = cluster.requests_for_trim(topic, ids[:1])[0]  # metadata still lists it: the run waits in use
    forged = replace(real, topic_name=f"{intruder}/ns/orders")
    handle = observed.client.get_workflow_handle(real.workflow_id)

    async def status() -> DeletionStatus:
        try:
            return await handle.query(STATUS_QUERY, result_type=DeletionStatus)
        except RPCError as exc:  # not started yet: ask again
            raise AssertionError(str(exc)) from exc

    observed_publisher.publish(real)

    async def waiting_in_use() -> None:
        assert (await status()).step == "wait_in_use"

    await eventually(waiting_in_use)
    observed_publisher.publish(forged)

    async def joined() -> None:
        assert (await status()).messages_collected == 2

    await eventually(joined)
    cluster.remove_ledgers_from_metadata(topic, ids[:1])  # the grace ends: the owner's request deletes
    result = (await results_of(observed.client, [real]))[real.workflow_id]
    assert [(d.topic_name, d.outcome) for d in result.decisions] == [
        (real.topic_name, Outcome.DELETED),
        (forged.topic_name, Outcome.ALREADY_DELETED),  # decided after the deletion: the znode is gone
    ]

    def counted() -> None:
        text = scrape(observed.metrics_url)
        completed = "ledger_deletion_requests_completed_total"
        assert metric_value(text, completed, tenant=owner, outcome="DELETED") == 1
        assert metric_value(text, completed, tenant=owner) == 1
        assert metric_value(text, completed, tenant=intruder, outcome="ALREADY_DELETED") == 1
        assert metric_value(text, "ledger_deletion_bk_ledgers_deleted_total", tenant=owner) == 1
        assert metric_value(text, "ledger_deletion_bk_ledgers_deleted_total", tenant=intruder) == 0
        # The checks run as local activities, in the workflow pool (workflows/ledger_deletion.py).
        verified = {"step": "verify_bk_metadata", "pool": "workflow"}
        steps = "ledger_deletion_step_duration_seconds_count"
        assert metric_value(text, steps, tenant=intruder, **verified) == 1
        # The owner's: the first round, and again once its owner let go (the store's listing of the first
        # round predates that answer, so it is read again before it counts).
        assert metric_value(text, steps, tenant=owner, **verified) == 2

    await eventually(counted)


async def test_undecodable_message_is_counted_as_dead_lettered(
    observed: Observed, observed_publisher: RequestPublisher
) -> None:
    before = metric_value(scrape(observed.metrics_url), "ledger_deletion_dead_lettered_total", step="decode")
    observed_publisher.publish_raw(b"\x00not avro")

    def counted() -> None:
        text = scrape(observed.metrics_url)
        assert metric_value(text, "ledger_deletion_dead_lettered_total", step="decode") == before + 1

    await eventually(counted)


def _spans_of(spans: tuple[ReadableSpan, ...], trace_id: int) -> list[ReadableSpan]:
    return [s for s in spans if s.context is not None and s.context.trace_id == trace_id]


async def test_one_trace_per_deletion_from_pulsar_receive_to_every_activity(
    observed: Observed, observed_publisher: RequestPublisher, cluster: SimulatedCluster
) -> None:
    tenant = f"trace-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant, offloaded=False)
    request = requests[0]
    # The producer (a tracing broker, or `submit`) started the trace: the ingest must continue it.
    trace_id = uuid.uuid4().int & ((1 << 128) - 1)
    parent_span_id = uuid.uuid4().int & ((1 << 64) - 1)
    traceparent = f"00-{trace_id:032x}-{parent_span_id:016x}-01"
    observed_publisher.publish(request, {"traceparent": traceparent})
    results = await results_of(observed.client, [request])
    assert results[request.workflow_id].outcome is Outcome.DELETED

    expected_activities = {
        "check_topic",
        "verify_bk_metadata",
        "ask_owner_broker",
        "delete_bk_ledger",
        "ack_messages",
    }

    def one_trace() -> None:
        spans = _spans_of(observed.spans.get_finished_spans(), trace_id)
        names = {s.name for s in spans}
        assert "pulsar-receive" in names
        assert "StartWorkflow:LedgerDeletionWorkflow" in names
        assert "RunWorkflow:LedgerDeletionWorkflow" in names
        assert {f"RunActivity:{a}" for a in expected_activities} <= names, names
        assert "LedgerDeletion:DELETED" in names
        receive = next(s for s in spans if s.name == "pulsar-receive")
        assert receive.parent is not None and receive.parent.span_id == parent_span_id
        assert receive.attributes is not None
        assert receive.attributes[tracing.ATTR_LEDGER_ID] == request.ledger_id
        assert receive.attributes[tracing.ATTR_TOPIC] == request.topic_name
        assert receive.attributes[tracing.ATTR_TENANT] == tenant
        for span in spans:
            if span.name.startswith("RunActivity:"):
                assert span.attributes is not None
                assert span.attributes[tracing.ATTR_LEDGER_ID] == request.ledger_id, span.name
                assert span.attributes[tracing.ATTR_TOPIC] == request.topic_name, span.name
                assert span.attributes[tracing.ATTR_TENANT] == tenant, span.name
        ack = next(s for s in spans if s.name == "RunActivity:ack_messages")
        assert ack.attributes is not None and ack.attributes[tracing.ATTR_OUTCOME] == "DELETED"
        final = next(s for s in spans if s.name == "LedgerDeletion:DELETED")
        assert final.attributes is not None and final.attributes[tracing.ATTR_OUTCOME] == "DELETED"
        # Nothing of this request went to another trace.
        others = [
            s
            for s in observed.spans.get_finished_spans()
            if s.attributes
            and s.attributes.get(tracing.ATTR_LEDGER_ID) == request.ledger_id
            and s.context is not None
            and s.context.trace_id != trace_id
        ]
        assert others == []

    await eventually(one_trace)


async def test_temporal_sdk_metrics_are_served_alongside(observed: Observed) -> None:
    """The Runtime's Prometheus endpoint (a second port) serves the SDK's worker metrics."""
    import socket

    import httpx
    from temporalio.client import Client
    from temporalio.runtime import Runtime

    from ledger_deletion.observability.setup import temporal_runtime

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = observed.settings.with_overrides(temporal_metrics_port=port, metrics_host="127.0.0.1")
    runtime = temporal_runtime(settings, ["workflow"])
    assert isinstance(runtime, Runtime)
    client = await Client.connect(settings.temporal_address, runtime=runtime)
    await client.count_workflows("WorkflowType = 'LedgerDeletionWorkflow'")

    async def served() -> None:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "temporal_request" in text

    await eventually(served)


async def test_failures_and_dead_letters_are_counted_by_step_and_error(
    observed: Observed, observed_publisher: RequestPublisher, cluster: SimulatedCluster
) -> None:
    """An offload on a driver the service cannot reach fails permanently: a failure, then a dead letter."""
    import dataclasses

    from ledger_deletion.request import LedgerType, OffloadDriverMetadata

    tenant = f"fail-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant)
    offload = next(r for r in requests if r.ledger_type is LedgerType.OFFLOAD_LEDGER)
    assert offload.context is not None and offload.context.offload_context is not None
    foreign_driver = dataclasses.replace(
        offload.context.offload_context, driver_metadata=OffloadDriverMetadata("azureblob", {})
    )
    broken = dataclasses.replace(
        offload, context=dataclasses.replace(offload.context, offload_context=foreign_driver)
    )
    observed_publisher.publish(broken)
    results = await results_of(observed.client, [broken])
    assert results[broken.workflow_id].outcome is Outcome.DEAD_LETTERED

    def counted() -> None:
        text = scrape(observed.metrics_url)
        t = {"tenant": tenant, "component": "MANAGED_LEDGER"}
        assert (
            metric_value(
                text, "ledger_deletion_offload_delete_failures_total", error="UnsupportedOffloadDriver", **t
            )
            == 1
        )
        assert (
            metric_value(text, "ledger_deletion_dead_lettered_total", step="delete_offload_segment", **t) == 1
        )
        assert (
            metric_value(text, "ledger_deletion_requests_completed_total", outcome="DEAD_LETTERED", **t) == 1
        )
        assert (
            metric_value(
                text,
                "ledger_deletion_step_duration_seconds_count",
                step="delete_offload_segment",
                outcome="error",
                **t,
            )
            == 1
        )
        assert metric_value(text, "ledger_deletion_offloaded_ledgers_deleted_total", **t) == 0

    await eventually(counted)
