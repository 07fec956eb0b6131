"""What a deletion costs in Temporal, counted from the histories of real runs on the stack.

Each shape is a real request through the service (the ``service`` fixture's pools, the session's deletion
topic, ZooKeeper, S3 and the admin emulator), and its cost is read back from the run's history: events,
workflow tasks completed, markers (the read-only checks, run as local activities), activity tasks, timers,
and Temporal Cloud actions as ``bench/histories.py`` counts them for the benchmark's table. The figures are
exact, not bounds, wherever the path does not depend on timing: a change that adds a round trip fails here.

A workflow task the server timed out (a worker too busy to answer in time, which a loaded machine causes and
the workflow does not ask for) is left out of the count, with its events; a test that sees one says so.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench.histories import count_history
from devstack.cluster import LEDGER_LIFETIME_MS, SimulatedCluster, SimulatedTopic
from ledger_deletion.contracts import Mode, Outcome
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.rollout import workflow_id
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools, wait_for_result
from workers.pools import RunningPools

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Cost:
    events: int
    workflow_tasks: int  # WorkflowTaskCompleted
    markers: int  # MarkerRecorded: each read-only check, a local activity
    activity_tasks: int  # ActivityTaskScheduled: deletes, dead letters, acks
    timers: int
    actions: int  # Temporal Cloud actions (bench/histories.py)


# A happy-path BookKeeper deletion: the first workflow task checks the topic and the ledger, asks the owner
# and schedules the delete; the second schedules the ack; the third completes with the outcome's upsert.
DELETED = Cost(events=21, workflow_tasks=3, markers=3, activity_tasks=2, timers=0, actions=5)


@dataclass
class Shapes:
    cluster: SimulatedCluster
    publisher: RequestPublisher
    client: Client
    namespace: str

    def topic(self, name: str, ledgers: int, *, offloaded: bool = False) -> tuple[SimulatedTopic, list[int]]:
        """A topic of ``ledgers`` new ledgers; with ``offloaded`` its first is offloaded, its BookKeeper copy
        gone."""
        ids = self.cluster.new_ledger_ids(ledgers)
        first = ids[:1] if offloaded else []
        topic = self.cluster.create_topic(
            f"{self.namespace}/{name}", ids, offloaded=first, bookkeeper_deleted=first
        )
        return topic, ids

    def trim(self, topic: SimulatedTopic, ledger_ids: list[int]) -> list[PendingDeleteLedgerInfo]:
        """The mark phase with its metadata update landed before the requests arrive (no grace to wait)."""
        requests = self.cluster.requests_for_trim(topic.name, ledger_ids)
        self.cluster.remove_ledgers_from_metadata(topic.name, ledger_ids)
        for request in requests:
            self.publisher.publish(request)
        return requests

    async def cost(self, request: PendingDeleteLedgerInfo, outcome: Outcome) -> Cost:
        result = await wait_for_result(self.client, request.workflow_id)
        assert result.outcome is outcome, result
        return await cost_of(self.client, request.workflow_id)


async def cost_of(client: Client, workflow_id: str) -> Cost:
    events = list((await client.get_workflow_handle(workflow_id).fetch_history()).events)
    own = _without_timed_out_tasks(events)
    counts = count_history(own)
    completed = sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in own)
    return Cost(len(own), completed, counts.markers, counts.activity_tasks, counts.timers, counts.actions)


def _without_timed_out_tasks(events: list[HistoryEvent]) -> list[HistoryEvent]:
    timed_out = [
        e.workflow_task_timed_out_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    ]
    if timed_out:
        print(f"{len(timed_out)} workflow task(s) timed out: left out of the count")
    dropped = {a.scheduled_event_id for a in timed_out} | {a.started_event_id for a in timed_out}
    return [
        e
        for e in events
        if e.event_id not in dropped and e.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    ]


def data_request(topic: SimulatedTopic, ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic.name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


@pytest.fixture
def shapes(
    cluster: SimulatedCluster, service: RunningPools, temporal_client: Client, publisher: RequestPublisher
) -> Shapes:
    return Shapes(cluster, publisher, temporal_client, f"cost/ns-{uuid.uuid4().hex[:6]}")


async def test_a_happy_path_deletion_costs_three_workflow_tasks(shapes: Shapes) -> None:
    """Topic exists, ledger trimmed, its owner no longer lists it: deleted."""
    topic, (trimmed, _) = shapes.topic("deleted", 2)
    (request,) = shapes.trim(topic, [trimmed])
    assert await shapes.cost(request, Outcome.DELETED) == DELETED


async def test_the_cost_of_each_shape_without_a_wait(shapes: Shapes) -> None:
    # Topic gone: nobody to ask, two checks.
    gone_topic, (gone, _) = shapes.topic("gone", 2)
    (topic_gone,) = shapes.cluster.requests_for_trim(gone_topic.name, [gone])
    shapes.cluster.delete_topic(gone_topic.name)
    shapes.publisher.publish(topic_gone)
    # Offloaded objects, BookKeeper copy already gone: topic, owner and the store's listing are checked.
    offload_topic, (offloaded, _) = shapes.topic("offloaded", 2, offloaded=True)
    (offload,) = shapes.trim(offload_topic, [offloaded])
    assert offload.ledger_type is LedgerType.OFFLOAD_LEDGER
    # Another application's ledger claimed by a Pulsar topic: refused after the metadata check.
    foreign_topic, _ = shapes.topic("foreign", 1)
    (foreign_id,) = shapes.cluster.new_ledger_ids(1)
    shapes.cluster.add_foreign_ledger(foreign_id)
    foreign = data_request(foreign_topic, foreign_id)
    shapes.publisher.publish(foreign)
    costs = list(
        await asyncio.gather(
            shapes.cost(topic_gone, Outcome.DELETED),
            shapes.cost(offload, Outcome.DELETED),
            shapes.cost(foreign, Outcome.SKIPPED_NOT_PULSAR),
        )
    )
    assert costs == [
        Cost(events=20, workflow_tasks=3, markers=2, activity_tasks=2, timers=0, actions=5),
        Cost(events=21, workflow_tasks=3, markers=3, activity_tasks=2, timers=0, actions=5),
        Cost(events=14, workflow_tasks=2, markers=2, activity_tasks=1, timers=0, actions=4),
    ]


async def test_the_cost_of_each_shape_that_waits(shapes: Shapes, zk: Any) -> None:
    # In use at the first check (the request came before the broker's metadata update), released during the
    # grace: one timer, the owner and the store read again, then deleted.
    late_topic, (late, _) = shapes.topic("late", 2)
    (in_use,) = shapes.cluster.requests_for_trim(late_topic.name, [late])
    shapes.publisher.publish(in_use)
    # Younger than the minimum age: one timer for the rest of it, verified again, then deleted.
    young_topic, (young, _) = shapes.topic("young", 2)
    zk.set(
        ledger_path(young),
        build_pulsar_ledger_metadata(
            managed_ledger_custom_metadata(young_topic.managed_ledger_name),
            ctime=int(time.time() * 1000) - 45_000,  # the minimum age (60 s) less 15 s: young when checked
        ),
    )
    (young_request,) = shapes.trim(young_topic, [young])
    # A data ledger still open, listed nowhere and newer than the topic's (one a rollover may be creating):
    # kept through the grace (two re-checks), then dead-lettered for replay (KeptForReplay), then acked.
    open_topic, _ = shapes.topic("open", 1)
    (open_id,) = shapes.cluster.new_ledger_ids(1)
    zk.create(
        ledger_path(open_id),
        build_pulsar_ledger_metadata(
            managed_ledger_custom_metadata(open_topic.managed_ledger_name),
            state="OPEN",
            ctime=int(time.time() * 1000) - LEDGER_LIFETIME_MS,
        ),
        makepath=True,
    )
    kept = data_request(open_topic, open_id)
    shapes.publisher.publish(kept)

    async def release_once_waiting() -> None:
        """The broker's metadata update lands while the run waits out its first grace timer."""
        handle = shapes.client.get_workflow_handle(in_use.workflow_id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                events = (await handle.fetch_history()).events
            except Exception:  # not started yet
                events = []
            if any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events):
                shapes.cluster.remove_ledgers_from_metadata(late_topic.name, [late])
                return
            await asyncio.sleep(0.1)
        raise AssertionError("the run never waited for the owner")

    _, *costs = await asyncio.gather(
        release_once_waiting(),
        shapes.cost(in_use, Outcome.DELETED),
        shapes.cost(young_request, Outcome.DELETED),
        shapes.cost(kept, Outcome.DEAD_LETTERED),
    )
    assert costs == [
        Cost(events=29, workflow_tasks=4, markers=5, activity_tasks=2, timers=1, actions=8),
        Cost(events=28, workflow_tasks=4, markers=4, activity_tasks=2, timers=1, actions=8),
        Cost(events=37, workflow_tasks=5, markers=8, activity_tasks=2, timers=2, actions=10),
    ]


async def test_a_duplicate_message_joins_the_run(shapes: Shapes) -> None:
    """The same request twice: the second message joins the run by signal. Where the signal lands depends on
    timing (the first task, a later one, during the ack): at most one more workflow task and one more ack."""
    topic, (trimmed, _) = shapes.topic("duplicate", 2)
    (request,) = shapes.trim(topic, [trimmed])
    shapes.publisher.publish(request)
    result = await wait_for_result(shapes.client, request.workflow_id)
    assert result.outcome is Outcome.DELETED and result.messages_acked == 2
    cost = await cost_of(shapes.client, request.workflow_id)
    assert cost.markers == DELETED.markers and cost.timers == 0
    assert DELETED.events + 1 <= cost.events <= DELETED.events + 1 + 6
    assert DELETED.workflow_tasks <= cost.workflow_tasks <= DELETED.workflow_tasks + 1
    assert DELETED.activity_tasks <= cost.activity_tasks <= DELETED.activity_tasks + 1
    assert cost.actions <= DELETED.actions + 2  # the signal, and maybe a second ack


async def test_a_delete_out_of_retries_is_dead_lettered(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client, stack: Any
) -> None:
    """An offload pool that cannot reach its S3: both attempts fail, the request is dead-lettered, then acked.
    The retry is an action of its own but no event (attempts before the last leave none)."""
    broken = settings.with_overrides(
        topic=f"{settings.topic}-cost-broken",
        task_queue_prefix=f"{settings.task_queue_prefix}-cost-broken",
        s3_endpoint="http://127.0.0.1:9",  # discard port: connection refused
        s3_endpoint_aliases=stack.s3_endpoint,
        max_attempts=2,
    )
    topic = f"cost/ns-{uuid.uuid4().hex[:6]}/broken"
    offloaded, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [offloaded, current], offloaded=[offloaded], bookkeeper_deleted=[offloaded])
    async with running_pools(broken, temporal_client):
        (request,) = cluster.requests_for_trim(topic, [offloaded])
        cluster.remove_ledgers_from_metadata(topic, [offloaded])
        with RequestPublisher(broken) as publisher:
            publisher.publish(request)
        result = await wait_for_result(temporal_client, request.workflow_id)
        assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "delete_offload_segment"
        cost = await cost_of(temporal_client, request.workflow_id)
    assert cost == Cost(events=27, workflow_tasks=4, markers=3, activity_tasks=3, timers=0, actions=7)


async def test_a_shadow_decision_costs_less_than_the_deletion_it_stands_for(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client
) -> None:
    """The happy path in shadow mode: the same checks, no delete activity, so one workflow task fewer. A live
    run pays nothing for the mode (``test_a_happy_path_deletion_costs_three_workflow_tasks``)."""
    run = uuid.uuid4().hex[:6]
    shadow = settings.with_overrides(
        topic=f"{settings.topic}-cost-shadow-{run}",
        task_queue_prefix=f"{settings.task_queue_prefix}-cost-shadow-{run}",
        mode=Mode.SHADOW,
    )
    topic = f"cost/ns-{run}/shadow"
    trimmed, current = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, [trimmed, current])
    async with running_pools(shadow, temporal_client):
        (request,) = cluster.requests_for_trim(topic, [trimmed])
        cluster.remove_ledgers_from_metadata(topic, [trimmed])
        with RequestPublisher(shadow) as publisher:
            publisher.publish(request)
        shadow_id = workflow_id(request, Mode.SHADOW)
        result = await wait_for_result(temporal_client, shadow_id)
        assert result.outcome is Outcome.WOULD_DELETE, result
        cost = await cost_of(temporal_client, shadow_id)
    print(f"shadow happy path: {cost}")
    assert cost == Cost(events=15, workflow_tasks=2, markers=3, activity_tasks=1, timers=0, actions=4)
