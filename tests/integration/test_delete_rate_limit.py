"""The delete rate limits (``bk_deletes_per_second``, ``offload_deletes_per_second``) are Temporal's
task-queue rate limits on the deleting pools' queues: the server hands out at most that many activity tasks
per second on the queue, whichever process polls (``max_task_queue_activities_per_second``, sent with every
poll)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import Outcome
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools, wait_for_result

pytestmark = pytest.mark.stack


async def test_the_deleting_pools_poll_with_their_rate_limits(
    settings: Settings, temporal_client: Client
) -> None:
    limited = settings.with_overrides(
        task_queue_prefix=f"{settings.task_queue_prefix}-rate-{uuid.uuid4().hex[:6]}",
        bk_deletes_per_second=2.5,
        offload_deletes_per_second=4.0,
    )
    # Not the pulsar pool: it would consume the session's deletion topic.
    pools = ("workflow", "bookkeeper", "offload")
    async with running_pools(limited, temporal_client, pools=pools) as running:
        rates = {
            w.task_queue: w.config().get("max_task_queue_activities_per_second") for w in running.workers
        }
    assert rates == {
        limited.task_queue("workflow"): None,
        limited.task_queue("bookkeeper"): 2.5,
        limited.task_queue("offload"): 4.0,
    }


async def test_a_rate_limit_on_one_shared_queue_is_refused(
    settings: Settings, temporal_client: Client
) -> None:
    colocated = settings.with_overrides(colocate_pools=True, bk_deletes_per_second=1.0)
    with pytest.raises(ConfigurationError, match="COLOCATE_POOLS"):
        async with running_pools(colocated, temporal_client):
            pass


async def test_the_limit_holds_across_two_processes(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client, stack: Any
) -> None:
    """Two bookkeeper-pool workers (two ``run_pools`` on two clients, as two processes would be) on a queue
    limited to 1/s: the deletes of a burst of requests start no faster than that, together.

    Which process runs each delete is the server's choice (in the runs seen here one took them all); the limit
    is the server's, per queue, so it does not depend on that.
    """
    run = uuid.uuid4().hex[:6]
    limited = settings.with_overrides(
        topic=f"{settings.topic}-rate-{run}",
        task_queue_prefix=f"{settings.task_queue_prefix}-rate2-{run}",
        bk_deletes_per_second=1.0,
    )
    topic = f"rate/ns-{run}/orders"
    ids = cluster.new_ledger_ids(9)
    cluster.create_topic(topic, ids)
    requests = cluster.requests_for_trim(topic, ids[:8])
    cluster.remove_ledgers_from_metadata(topic, ids[:8])
    # Two bookkeeper-pool processes, each with a client of its own (the SDK registers one worker per queue
    # and client), named so the history says which one ran each delete; the other pools in a third.
    b, c = [await Client.connect(stack.temporal_address, identity=f"{name}-{run}") for name in "bc"]
    async with (
        running_pools(limited, temporal_client, pools=("workflow", "pulsar", "offload")),
        running_pools(limited, b, pools=("bookkeeper",)),
        running_pools(limited, c, pools=("bookkeeper",)),
    ):
        with RequestPublisher(limited) as publisher:
            for request in requests:
                publisher.publish(request)
        results = await asyncio.gather(*(wait_for_result(temporal_client, r.workflow_id) for r in requests))
    assert {r.outcome for r in results} == {Outcome.DELETED}
    started: list[float] = []
    identities: set[str] = set()
    for request in requests:
        events = (await temporal_client.get_workflow_handle(request.workflow_id).fetch_history()).events
        scheduled = {
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "delete_bk_ledger"
        }
        for e in events:
            if (
                e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
            ):
                started.append(e.event_time.ToNanoseconds() / 1e9)
                identities.add(e.activity_task_started_event_attributes.identity)
    started.sort()
    assert len(started) == 8 and identities <= {f"b-{run}", f"c-{run}"}
    # At 1/s, 8 deletes span at least 7 s less the server's burst allowance; unlimited, they start together.
    print(f"delete starts span {started[-1] - started[0]:.1f} s over {len(identities)} worker(s)")
    assert started[-1] - started[0] >= 5.0
