"""Record the replay-test histories: ``python -m tests.workflow.record_histories [SHAPE ...]``.

The one way to record them. Each shape of run the workflow can take (``SHAPES``) is run once on Temporal's
test environment (``environment.py``, no other service), with the fake activities of the workflow tests
scripted for it, and its history is written to ``histories/<shape>.json``; with shape names, only those
are recorded. ``test_replay.py`` replays every file, and checks that each shape has exactly one.

When to record (the versioning rule, also in ``workflows/ledger_deletion.py``): before 1.0, a workflow
change re-records every history (run this with no argument), and a new shape of run adds a case here.
From the first release on, a workflow change is versioned (``workflow.patched``, a new input field with a
default, or a new workflow type) and its new shape is recorded as a history of its own next to the old
ones, which stay: runs of the old shape may still be open in production.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from ledger_deletion.contracts import DeleteBkLedgerStatus, MessageRef, Mode, RetrySpec, Verdict
from ledger_deletion.request import PendingDeleteLedgerInfo
from tests.workflow.environment import start_environment
from tests.workflow.support import (
    FORGED_TOPIC,
    Fakes,
    Harness,
    data_request,
    offload_request,
    schema_request,
)
from workflows.ledger_deletion import MAX_JOINED_DECISIONS, LedgerDeletionWorkflow

HISTORIES = Path(__file__).parent / "histories"
VERSION_RACE = [DeleteBkLedgerStatus.VERSION_CHANGED, DeleteBkLedgerStatus.DELETED]
FLOOD_TOPICS = [f"mallory/ns/forged-{i}" for i in range(MAX_JOINED_DECISIONS + 2)]


@dataclass(frozen=True)
class Shape:
    """One shape of run: the request that starts it, and how the fakes answer (``Fakes`` fields).

    ``join_in_first_task``: the second message is signalled with the start, so the first workflow task, which
    runs the first round of checks, sees it. ``policy``: ``DeletionPolicy`` fields the shape changes.
    ``mode``: the run's (``DeletionInput.mode``).
    """

    request: PendingDeleteLedgerInfo
    fakes: dict[str, Any] = field(default_factory=dict)
    join_in_first_task: bool = False
    policy: dict[str, Any] = field(default_factory=dict)
    mode: Mode = Mode.LIVE


SHAPES: dict[str, Shape] = {
    "deleted": Shape(data_request(901)),
    "topic_gone": Shape(data_request(901), {"topic_exists": False}),
    "mismatch": Shape(data_request(901), {"verdicts": [Verdict.MISMATCH]}),
    "in_use_kept": Shape(data_request(901), {"in_use_answers": [True]}),
    "in_use_then_deleted": Shape(data_request(901), {"in_use_answers": [True, False]}),
    "version_changed": Shape(data_request(901), {"delete_statuses": VERSION_RACE}),
    "dead_lettered": Shape(data_request(901), {"delete_error": "ZooKeeper gone"}),
    "offloaded": Shape(offload_request(900)),
    # The topic is gone here: no owner to ask, but the stores are read (another cluster's may list it).
    "offload_topic_gone": Shape(offload_request(900), {"topic_exists": False}),
    # Its namespace is another cluster's: kept, acked, nothing deleted.
    "offload_unknown_namespace": Shape(
        offload_request(900),
        {"topic_exists": False, "offload_namespace_refusal": "namespace t/ns is known to no store"},
    ),
    "schema_listed_then_deleted": Shape(schema_request(902), {"schema_listed": [True, False]}),
    # The owner no longer lists the ledger, Pulsar's metadata store still does for one more check.
    "store_listed_then_deleted": Shape(data_request(901), {"store_listed": [True, True, False]}),
    # The owner refuses to load the topic (transaction-internal): the store decides alone, and lists nothing.
    "owner_cannot_load_then_deleted": Shape(
        data_request(906, topic_name="public/default/orders-sub__transaction_pending_ack"),
        {"owner_cannot_load": True},
    ),
    # The second message, there before the first round of checks, asks for the check the first did not.
    "joined_asks_check": Shape(
        data_request(903, check_ledger_still_in_use=False),
        {"in_use_answers": [True, False]},
        join_in_first_task=True,
    ),
    # A forged request (another topic) starts the run; the real one joins with its request and is decided
    # on its own.
    "joined_other_request": Shape(
        data_request(901),
        {"first_check_stalls_seconds": 1.0, "verdict_by_topic": {FORGED_TOPIC: Verdict.MISMATCH}},
    ),
    # The owner lists the ledger under a newer offload attempt than the request's: its objects are deleted.
    "superseded_offload": Shape(offload_request(905), {"in_use_answers": [True], "offload_superseded": True}),
    # A flood of other requests joins while check_topic stalls; the broker's request joins past the limit.
    "broker_past_limit": Shape(
        data_request(901),
        {
            "first_check_stalls_seconds": 2.0,
            "verdict_by_topic": {topic: Verdict.MISMATCH for topic in FLOOD_TOPICS},
        },
    ),
    # The owner lists the ledger offloaded, and its managed ledger has released the BookKeeper copy.
    "released_bk_copy": Shape(
        data_request(901),
        {"in_use_answers": [True], "owner_lists_offloaded": True, "bk_copy_released": True},
    ),
    # The store lists the ledger past the grace, its owner does not: dead-lettered for replay, then acked.
    "kept_for_replay": Shape(data_request(901), {"store_listed": [True]}),
    # A data ledger left OPEN below the newest listed one (its broker died mid-rollover): reported, acked.
    "left_open": Shape(data_request(901), {"states": ["OPEN"], "newest_listed": 902}),
    # The store lists the offloaded objects under the request's uuid for one check, then no more.
    "offload_listed_then_deleted": Shape(offload_request(900), {"offload_listed": [True, False]}),
    # The ledger is younger than the minimum age (60 s by default): a timer for the rest, verified again.
    "young_then_deleted": Shape(data_request(901), {"ages": [59.5, 61.0]}),
    # A check (a local activity) fails once and is retried inside its workflow task.
    "check_retried": Shape(data_request(901), {"topic_failures": 1}),
    # A check fails once, and its next attempt is further off than the local retry threshold: a timer, then
    # the check again.
    "check_retried_after_timer": Shape(
        data_request(901),
        {"topic_failures": 1},
        policy={"local_retry_threshold_seconds": 0.2, "step_retry": {"check_topic": RetrySpec(3, 0.5, 0.5)}},
    ),
    # A check fails for good: dead-lettered with the check as the failed step, then acked.
    "check_failed": Shape(data_request(901), {"topic_failures": 1, "topic_failure_permanent": True}),
    # Shadow mode: every check, then what a live run would delete, and no delete.
    "shadow_would_delete": Shape(data_request(901), mode=Mode.SHADOW),
    "shadow_offloaded": Shape(offload_request(900), mode=Mode.SHADOW),
    # The kill switch refuses the delete twice; no resume signal comes, the run's backstop timer looks again.
    "paused_then_deleted": Shape(
        data_request(901),
        {"paused_deletes": 2},
        policy={"pause_recheck_seconds": 0.3, "pause_recheck_max_seconds": 0.6},
    ),
    # A live process's request outside its live allow-list: decided in shadow, dead-lettered for replay.
    "outside_allow_list": Shape(data_request(901), mode=Mode.SHADOW),
}


def _messages(
    name: str, queue: str, request: PendingDeleteLedgerInfo
) -> tuple[PendingDeleteLedgerInfo, list[MessageRef]]:
    """The run's own request and the messages of the shape: the first starts the run, the others join (with
    the run's request unless the shape gives another)."""
    if name == "broker_past_limit":
        flood = [replace(request, topic_name=topic) for topic in FLOOD_TOPICS]
        refs = [MessageRef("m-0", queue)]
        refs += [MessageRef(f"m-{i}", queue, request=r) for i, r in enumerate(flood[1:], 1)]
        return flood[0], [*refs, MessageRef("m-broker", queue, request=request, from_system_topic=True)]
    if name == "joined_other_request":
        forged = replace(request, topic_name=FORGED_TOPIC)
        return forged, [MessageRef("m-1", queue), MessageRef("m-2", queue, request=request)]
    if name == "joined_asks_check":
        asks = replace(request, check_ledger_still_in_use=True)
        return request, [MessageRef("m-1", queue), MessageRef("m-2", queue, request=asks)]
    if name == "outside_allow_list":
        why = "public is outside the live allow-list (LEDGER_DELETION_LIVE_ALLOW)"
        return request, [MessageRef("m-1", queue, replay_reason=why)]
    return request, [MessageRef("m-1", queue), MessageRef("m-2", queue)]


async def record_shape(client: Client, name: str) -> int:
    """Run the shape once on its own task queue and write its history; returns the number of events."""
    shape = SHAPES[name]
    fakes = Fakes(**copy.deepcopy(shape.fakes))  # the fakes consume their scripted answers
    queue = f"record-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(8) as executor:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[LedgerDeletionWorkflow],
            activities=fakes.activities(),
            activity_executor=executor,
        ):
            own, refs = _messages(name, queue, shape.request)
            harness = Harness(client, queue, fakes)
            policy = replace(harness.policy, **shape.policy)
            handle = await harness.start(
                own, refs=refs, policy=policy, join_in_first_task=shape.join_in_first_task, mode=shape.mode
            )
            await asyncio.wait_for(handle.result(), timeout=60)
    history = await handle.fetch_history()
    (HISTORIES / f"{name}.json").write_text(history.to_json())
    return len(history.events)


async def record(names: list[str]) -> None:
    unknown = sorted(set(names) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    async with await start_environment() as environment:
        for name in names or list(SHAPES):
            print(name, await record_shape(environment.client, name), "events")


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:]))
