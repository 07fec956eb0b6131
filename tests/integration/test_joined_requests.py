"""A request that joins a run of the same ledger is decided on its own when it is not the run's request.

The run of a ledger is keyed by ledger id, so any request naming that id joins it. A forged or stale request
that starts the run first must not answer for the real one that joins: before, the real request was acked
with the forged one's outcome (SKIPPED_METADATA_MISMATCH) and its ledger left an orphan.

Real pools, real ingest, real ZooKeeper. The workflow pool starts only once both messages are in, so the
second message joins the first's run for certain (no race with its end).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError
from typer.testing import CliRunner

from devstack.cluster import SimulatedCluster
from ledger_deletion.cli import app
from ledger_deletion.contracts import Outcome
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools, wait_for_result, wait_until_all_acked

pytestmark = pytest.mark.stack

ACTIVITY_POOLS = ("pulsar", "bookkeeper", "offload")


async def wait_for_events(client: Client, workflow_id: str, kind: EventType.ValueType, count: int) -> None:
    """Until the workflow's history holds ``count`` events of ``kind`` (the run exists, the signal is in)."""
    for _ in range(200):
        try:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
        except RPCError:  # not started yet
            history = None
        if history is not None and sum(e.event_type == kind for e in history.events) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id}: fewer than {count} events of type {kind}")


@pytest.mark.parametrize("forged_first", [True, False])
async def test_a_forged_request_for_the_same_ledger_never_answers_for_the_real_one(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client, forged_first: bool
) -> None:
    """A request naming another topic than the ledger's (what a tenant could send about another's ledger)
    and the broker's real request for the ledger, in either order: the ledger is deleted once, each message
    is acked, and the run reports both decisions."""
    own = settings.with_overrides(
        topic=f"{settings.topic}-join-{uuid.uuid4().hex[:6]}",
        task_queue_prefix=f"{settings.task_queue_prefix}-join-{uuid.uuid4().hex[:6]}",
    )
    namespace = f"e2e/ns-{uuid.uuid4().hex[:6]}"
    ledger_id, current = cluster.new_ledger_ids(2)
    topic = cluster.create_topic(f"{namespace}/orders", [ledger_id, current])
    cluster.remove_ledgers_from_metadata(topic.name, [ledger_id])  # the mark phase: trimmed, then published
    real = PendingDeleteLedgerInfo(topic.name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)
    forged = replace(real, topic_name=f"{namespace}/not-the-owner", check_ledger_still_in_use=False)
    first, second = (forged, real) if forged_first else (real, forged)

    async with running_pools(own, temporal_client, pools=ACTIVITY_POOLS) as activity_pools:
        with RequestPublisher(own) as publisher:
            publisher.publish(first)
            await wait_for_events(
                temporal_client, real.workflow_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 1
            )
            publisher.publish(second)
            await wait_for_events(
                temporal_client, real.workflow_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, 1
            )
        async with running_pools(own, temporal_client, pools=("workflow",)):
            result = await wait_for_result(temporal_client, real.workflow_id, timeout=60)
            await wait_until_all_acked(activity_pools)

    assert not cluster.ledger_exists(ledger_id)
    assert cluster.ledger_exists(current)
    assert result.outcome is Outcome.DELETED and result.messages_acked == 2
    decided = {d.topic_name: d.outcome for d in result.decisions}
    assert decided[real.topic_name] is Outcome.DELETED
    # Decided after the deletion, the forged request finds the ledger gone; before it, tags that differ.
    assert decided[forged.topic_name] is (
        Outcome.SKIPPED_METADATA_MISMATCH if forged_first else Outcome.ALREADY_DELETED
    )
    runs = [w async for w in temporal_client.list_workflows(f"WorkflowId = '{real.workflow_id}'")]
    assert len(runs) == 1
    # What an operator sees: both decisions under the run's result.
    env = {"COLUMNS": "250", "TEMPORAL_ADDRESS": settings.temporal_address}
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["show", real.workflow_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"decided: DELETED for {real.summary()}" in shown.output
    assert f"for {forged.summary()}" in shown.output
