"""A held message whose workflow ended without acking it (the ack could not start in time while this process
was alive) is settled by the ingest loop's sweeper: acked if the workflow completed, handed to a new run if
it was terminated, if it completed deciding another request than the message's, or if its execution is gone
(deleted by an operator, past retention). Real Pulsar messages, real workflows."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import replace
from typing import Any

import pulsar
import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion.adapters import messaging
from ledger_deletion.contracts import DeletionInput, DeletionResult, MessageRef, Outcome
from ledger_deletion.policy import deletion_policy
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.integration.ingest_loop import unpolled_ingestor
from workflows.ledger_deletion import WORKFLOW_NAME

pytestmark = pytest.mark.stack


def request(ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo("sweep/ns/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


def received(settings: Settings, topic: str, count: int) -> tuple[Any, Any, list[Any]]:
    """A client, a Shared consumer on ``topic`` and ``count`` messages it received and holds unacked."""
    client = pulsar.Client(settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(
        topic,
        "sweeper",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"m{i}".encode())
    return client, consumer, [consumer.receive(timeout_millis=10_000) for _ in range(count)]


async def test_sweeper_settles_messages_of_ended_workflows(
    settings: Settings, temporal_client: Client, service, new_ledger_id
) -> None:
    topic = f"{settings.topic}-sweep-{uuid.uuid4().hex[:6]}"
    client, consumer, held = received(settings, topic, 4)
    pending = messaging.PendingAcks()
    policy = deletion_policy(settings)
    # Acks of these workflows go to a queue nobody polls: they give up, as when Temporal was down too long.
    ingestor = unpolled_ingestor(
        settings,
        temporal_client,
        client,
        topic,
        consumer,
        pending,
        workflow_queue=settings.task_queue("workflow"),
    )
    completed, running, terminated = (request(new_ledger_id()) for _ in range(3))
    idle_queue = f"idle-{uuid.uuid4().hex[:6]}"  # no worker polls it: that workflow stays running
    for message, req, queue in zip(
        held[:3],
        (completed, running, terminated),
        (settings.task_queue("workflow"), idle_queue, idle_queue),
        strict=True,
    ):
        key = str(message.message_id())
        pending.hold(key, consumer, message.message_id())
        await temporal_client.start_workflow(
            WORKFLOW_NAME,
            # topic and znode do not exist: ALREADY_DELETED at once where polled
            DeletionInput(req, policy, first_message=MessageRef(key, ingestor.ack_queue)),
            id=req.workflow_id,
            task_queue=queue,
        )
        pending.bind(key, messaging.Handoff(req.workflow_id, req, time.monotonic() - 1000))
    # Another request for the completed run's ledger, which joined an earlier run of it that ended
    # undecided (the run that completed never saw it): acking it would answer it with another's outcome.
    other = replace(completed, topic_name="sweep/ns/another-topic")
    other_key = str(held[3].message_id())
    pending.hold(other_key, consumer, held[3].message_id())
    pending.bind(other_key, messaging.Handoff(other.workflow_id, other, time.monotonic() - 1000))
    result: DeletionResult = await temporal_client.get_workflow_handle(
        completed.workflow_id, result_type=DeletionResult
    ).result()
    assert result.outcome is Outcome.ALREADY_DELETED and result.messages_unacked == 1  # its ack was given up
    await temporal_client.get_workflow_handle(terminated.workflow_id).terminate("operator")
    completed_run = (await temporal_client.get_workflow_handle(completed.workflow_id).describe()).run_id

    # completed: acked; terminated, and the other request: handed to a new run
    assert await ingestor.sweep(held_for=0) == 3
    assert len(pending) == 3  # the running one and the two re-submitted ones are still held
    rerun = temporal_client.get_workflow_handle(other.workflow_id)
    assert (await rerun.describe()).run_id != completed_run  # a run of its own, started with its request
    started = [e async for e in rerun.fetch_history_events()][0].workflow_execution_started_event_attributes
    [rerun_input] = await temporal_client.data_converter.decode(list(started.input.payloads), [DeletionInput])
    assert rerun_input.request == other
    restarted = await temporal_client.get_workflow_handle(terminated.workflow_id).describe()
    assert restarted.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED)
    await temporal_client.get_workflow_handle(running.workflow_id).terminate("test cleanup")
    with contextlib.suppress(RPCError):  # it may have completed already
        await temporal_client.get_workflow_handle(other.workflow_id).terminate("test cleanup")
    consumer.close()
    # Only the completed workflow's message was acked: the other three come back to a new consumer.
    again = client.subscribe(topic, "sweeper", consumer_type=pulsar.ConsumerType.Shared)
    redelivered = sorted(again.receive(timeout_millis=10_000).data() for _ in range(3))
    assert redelivered == [b"m1", b"m2", b"m3"]
    with pytest.raises(pulsar.Timeout):
        again.receive(timeout_millis=1500)
    client.close()


async def test_sweeper_hands_the_message_of_a_deleted_execution_to_a_new_run(
    settings: Settings, temporal_client: Client, new_ledger_id
) -> None:
    topic = f"{settings.topic}-sweep-deleted-{uuid.uuid4().hex[:6]}"
    client, consumer, [message] = received(settings, topic, 1)
    pending = messaging.PendingAcks()
    # Runs start on a queue no worker polls: every run stays running.
    ingestor = unpolled_ingestor(settings, temporal_client, client, topic, consumer, pending)
    req = request(new_ledger_id())
    key = str(message.message_id())
    pending.hold(key, consumer, message.message_id())
    try:
        await ingestor._start_or_join(req, MessageRef(key, ingestor.ack_queue))
        pending.bind(key, messaging.Handoff(req.workflow_id, req, time.monotonic() - 1000))
        deleted = (await temporal_client.get_workflow_handle(req.workflow_id).describe()).run_id
        # An operator deletes the execution (the same as it passing retention): nothing will ever ack it.
        await temporal_client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=temporal_client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=req.workflow_id, run_id=deleted),
            )
        )
        await until_not_found(temporal_client, req.workflow_id)  # deletion is asynchronous

        assert await ingestor.sweep(held_for=0) == 1
        assert len(pending) == 1  # still held, now by the new run, which acks it once it has decided
        [(_, handoff)] = pending.bound_before(float("inf"))
        assert handoff.workflow_id == req.workflow_id
        rerun = temporal_client.get_workflow_handle(req.workflow_id)
        assert (await rerun.describe()).run_id != deleted
        events = [e async for e in rerun.fetch_history_events()]
        started = events[0].workflow_execution_started_event_attributes
        [rerun_input] = await temporal_client.data_converter.decode(
            list(started.input.payloads), [DeletionInput]
        )
        assert rerun_input.request == req
        assert rerun_input.first_message.message_id == key
    finally:
        with contextlib.suppress(RPCError):
            await temporal_client.get_workflow_handle(req.workflow_id).terminate("test cleanup")
        client.close()


async def until_not_found(client: Client, workflow_id: str, timeout: float = 30) -> None:
    """Until describing the workflow answers NOT_FOUND; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        assert time.monotonic() < deadline, f"{workflow_id} still there {timeout} s after its deletion"
        await asyncio.sleep(0.2)
