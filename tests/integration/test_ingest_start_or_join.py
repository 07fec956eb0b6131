"""How the ingest hands a message to its ledger's workflow: the first message starts the run and rides in its
input; a message for a ledger whose run is going joins it by signal; a run that closed between the two is
started again; and the start is eager when this process runs the workflow worker. Real Temporal, real
Pulsar client (nothing is received here: the messages are references).
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
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from ledger_deletion.adapters import messaging
from ledger_deletion.contracts import DeletionInput, DeletionPolicy, MessageRef
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.ops.deletions import describe_deletion
from ledger_deletion.policy import deletion_policy
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from workers.ingest import Ingestor
from workflows.ledger_deletion import LedgerDeletionWorkflow

pytestmark = pytest.mark.stack


@dataclass
class Ingestors:
    """Builds ingestors for a test and, at teardown, ends the workflows they started and closes clients."""

    settings: Settings
    temporal: Client
    workflow_ids: list[str] = field(default_factory=list)
    pulsar_clients: list[Any] = field(default_factory=list)

    def new(self, workflow_queue: str, policy: DeletionPolicy | None = None) -> Ingestor:
        quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        client = pulsar.Client(self.settings.pulsar_url, logger=quiet)
        self.pulsar_clients.append(client)
        return Ingestor(
            self.temporal,
            consumer=None,
            pending=messaging.PendingAcks(),
            dead_letters=messaging.Publisher(client, f"{self.settings.topic}-join-DLQ"),
            policy=policy or deletion_policy(self.settings),
            workflow_queue=workflow_queue,
            ack_queue=f"nobody-{uuid.uuid4().hex[:6]}",
            system_topic=self.settings.topic,
        )

    def request(self, ledger_id: int) -> PendingDeleteLedgerInfo:
        component, kind = LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER
        req = PendingDeleteLedgerInfo("join/ns/t", component, kind, ledger_id)
        self.workflow_ids.append(req.workflow_id)
        return req


@pytest.fixture
async def ingestors(settings: Settings, temporal_client: Client) -> AsyncIterator[Ingestors]:
    made = Ingestors(settings, temporal_client)
    yield made
    for workflow_id in made.workflow_ids:
        with contextlib.suppress(RPCError):  # already closed
            await temporal_client.get_workflow_handle(workflow_id).terminate("test cleanup")
    for client in made.pulsar_clients:
        client.close()


async def started_input(client: Client, handle: WorkflowHandle[Any, Any]) -> DeletionInput:
    history = await handle.fetch_history()
    started = history.events[0]
    assert started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    payloads = list(started.workflow_execution_started_event_attributes.input.payloads)
    [value] = await client.data_converter.decode(payloads, [DeletionInput])
    assert isinstance(value, DeletionInput)
    return value


async def signals_of(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in history.events)


async def test_first_message_starts_the_run_and_the_next_joins_it(
    ingestors: Ingestors, temporal_client: Client, new_ledger_id
) -> None:
    # No worker polls this queue: the run stays open, as a deletion waiting out its in-use grace would.
    ingestor = ingestors.new(f"idle-{uuid.uuid4().hex[:6]}")
    req = ingestors.request(new_ledger_id())
    first, second = MessageRef("1:1:-1", ingestor.ack_queue), MessageRef("1:2:-1", ingestor.ack_queue)

    await ingestor._start_or_join(req, first)
    await ingestor._start_or_join(req, second)

    handle = temporal_client.get_workflow_handle(req.workflow_id)
    assert (await started_input(temporal_client, handle)).first_message == first
    assert await signals_of(handle) == 1  # only the second message, not the first again
    assert (await describe_deletion(temporal_client, req.workflow_id)).messages == 2
    runs = [w async for w in temporal_client.list_workflows(f"WorkflowId = '{req.workflow_id}'")]
    assert len(runs) == 1


@dataclass
class ReceivedMessage:
    """What the ingest reads of a received Pulsar message."""

    payload: bytes
    topic: str

    def data(self) -> bytes:
        return self.payload

    def properties(self) -> dict[str, str]:
        return {}

    def topic_name(self) -> str:
        return self.topic

    def redelivery_count(self) -> int:
        return 0


async def test_a_joining_message_carries_its_own_in_use_check(
    ingestors: Ingestors, temporal_client: Client, new_ledger_id
) -> None:
    """The run's input has the first message's checkLedgerStillInUse; a joining message brings its own, so a
    run started without the check learns that a later message asks for it."""
    ingestor = ingestors.new(f"idle-{uuid.uuid4().hex[:6]}")
    req = ingestors.request(new_ledger_id())
    for key, check in (("1:1:-1", False), ("1:2:-1", True)):
        encoded = encode_request(replace(req, check_ledger_still_in_use=check))
        await ingestor._hand_off(ReceivedMessage(encoded, topic=ingestor.system_topic), key)

    handle = temporal_client.get_workflow_handle(req.workflow_id)
    started = await started_input(temporal_client, handle)
    assert started.request.check_ledger_still_in_use is False
    assert started.first_message.request is None  # the first message's request is the input's
    history = await handle.fetch_history()
    [signal] = [
        e.workflow_execution_signaled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    [joined] = await temporal_client.data_converter.decode(list(signal.input.payloads), [MessageRef])
    # It brings its request too: the run decides it on its own should it not be the run's (the workflow
    # tests and test_joined_requests.py); here it is the run's own, but for the check.
    assert joined == MessageRef(
        "1:2:-1",
        ingestor.ack_queue,
        ingestor.system_topic,
        0,
        replace(req, check_ledger_still_in_use=True),
        from_system_topic=True,  # read from the system topic: the broker's
    )


async def test_run_that_closed_before_the_join_is_started_again(
    ingestors: Ingestors, temporal_client: Client, new_ledger_id
) -> None:
    ingestor = ingestors.new(f"idle-{uuid.uuid4().hex[:6]}")
    req = ingestors.request(new_ledger_id())
    ref = MessageRef("2:1:-1", ingestor.ack_queue)
    await ingestor._start_or_join(req, MessageRef("2:0:-1", ingestor.ack_queue))
    old = await temporal_client.get_workflow_handle(req.workflow_id).describe()
    await temporal_client.get_workflow_handle(req.workflow_id).terminate("closed under the ingest")
    assert await ingestor._join(req.workflow_id, ref) is False  # nothing running to signal

    # The start that saw the old run still open, just before it closed: the signal then finds no run.
    real_start, refused = ingestor._start, list[MessageRef]()

    async def start_racing_a_close(r: PendingDeleteLedgerInfo, m: MessageRef) -> WorkflowHandle[Any, Any]:
        if not refused:
            refused.append(m)
            raise WorkflowAlreadyStartedError(r.workflow_id, "LedgerDeletionWorkflow", run_id=old.run_id)
        return await real_start(r, m)

    ingestor._start = start_racing_a_close  # type: ignore[method-assign,assignment]
    await asyncio.wait_for(ingestor._start_or_join(req, ref), timeout=10)

    handle = temporal_client.get_workflow_handle(req.workflow_id)
    current = await handle.describe()
    assert refused == [ref] and current.run_id != old.run_id
    assert current.status == WorkflowExecutionStatus.RUNNING
    # The message was not lost on the way.
    assert (await started_input(temporal_client, handle)).first_message == ref


async def test_start_is_eager_when_this_process_runs_the_workflow_worker(
    ingestors: Ingestors, temporal_client: Client, new_ledger_id
) -> None:
    queue = f"eager-{uuid.uuid4().hex[:6]}"
    # Activities go to a queue nobody polls: the run stays at its first steps, which is all this needs.
    idle = f"idle-{uuid.uuid4().hex[:6]}"
    policy = DeletionPolicy(pulsar_queue=idle, bookkeeper_queue=idle, offload_queue=idle)
    ingestor = ingestors.new(queue, policy)
    req = ingestors.request(new_ledger_id())
    async with Worker(temporal_client, task_queue=queue, workflows=[LedgerDeletionWorkflow]):
        ingestor.eager_start = False
        await ingestor._start_or_join(req, MessageRef("3:1:-1", ingestor.ack_queue))
        assert ingestor.stats.started_eagerly == 0
        await temporal_client.get_workflow_handle(req.workflow_id).terminate("next")

        ingestor.eager_start = True
        await ingestor._start_or_join(req, MessageRef("3:2:-1", ingestor.ack_queue))
        assert ingestor.stats.started_eagerly == 1
        await temporal_client.get_workflow_handle(req.workflow_id).terminate("done")
