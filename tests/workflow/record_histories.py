"""Record replay-test histories: ``python -m tests.workflow.record_histories PREFIX`` with the stack up.

Each shape of run the workflow code has had keeps its histories (``deleted.json``: started by signal-with-
start; ``first_message-*``: first message in the input; ``outcome_with_completion-*``: the outcome search
attributes written with the completion; ``recheck-*``: the schema locator wait and the owner asked again after
a version race; ``joined-*``: a joined message asks for the in-use check the first did not,
``joined_asks_check`` only; ``unpatched_join-*``: the same case recorded by the code before, which ignored
that ask, and has no patch marker; ``released-*`` and ``unpatched_release-*``: ``released_bk_copy`` with and
without the check that the broker released an offloaded ledger's BookKeeper copy; ``joined_request-*``:
``joined_other_request``, a joined message whose request is not the run's, decided on its own (recorded on
c234001; the shape of joined decisions was revised, in e4fb492, before any of it landed, so no run of the
earlier shape exists); ``unpatched_request-*``: the same case recorded by the code before, which acked it with
the run's outcome; ``superseded-*`` and ``unpatched_supersede-*``: ``superseded_offload``, the objects of a
replaced offload attempt, with and without the check of the uuid the managed ledger stores; ``broker_limit-*``
and ``unpatched_broker_limit-*``: ``broker_past_limit``, the broker's request joining past the limit of joined
decisions, decided and dead-lettered undecided; ``store_listing-*``: ``store_listed_then_deleted``, a ledger
Pulsar's metadata store still lists after its owner dropped it, kept until the store drops it too; the runs
before that check never read a listing, so they replay unchanged). Record one case with ``python -m
tests.workflow.record_histories PREFIX ADDRESS CASE``. When the workflow
changes what a run does, guard the change (a new input field with a default, or ``workflow.patched()``) and
record the new shape under a new prefix, keeping the old files: those runs may still be open in production.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from ledger_deletion.contracts import DeleteBkLedgerStatus, MessageRef, Verdict
from ledger_deletion.request import PendingDeleteLedgerInfo
from tests.workflow.test_workflow_logic import (
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

CASES: dict[str, Callable[[Fakes], None]] = {
    "deleted": lambda f: None,
    "in_use_then_deleted": lambda f: setattr(f, "in_use_answers", [True, False]),
    "version_changed": lambda f: setattr(f, "delete_statuses", list(VERSION_RACE)),
    "dead_lettered": lambda f: setattr(f, "delete_error", "ZooKeeper gone"),
    "offloaded": lambda f: None,
    "schema_listed_then_deleted": lambda f: setattr(f, "schema_listed", [True, False]),
    # The owner no longer lists the ledger, Pulsar's metadata store still does for one more check.
    "store_listed_then_deleted": lambda f: setattr(f, "store_listed", [True, True, False]),
    # The second message joins while check_topic stalls and asks for the check the first did not.
    "joined_asks_check": lambda f: (
        setattr(f, "first_check_stalls_seconds", 1.0),
        setattr(f, "in_use_answers", [True, False]),
    ),
    # A forged request (another topic) starts the run; the real one joins with its request and is decided
    # on its own.
    "joined_other_request": lambda f: (
        setattr(f, "first_check_stalls_seconds", 1.0),
        setattr(f, "verdict_by_topic", {FORGED_TOPIC: Verdict.MISMATCH}),
    ),
    # The owner lists the ledger under a newer offload attempt than the request's: its objects are deleted.
    "superseded_offload": lambda f: (
        setattr(f, "in_use_answers", [True]),
        setattr(f, "offload_superseded", True),
    ),
    # A flood of other requests joins while check_topic stalls; the broker's request joins past the limit.
    "broker_past_limit": lambda f: (
        setattr(f, "first_check_stalls_seconds", 2.0),
        setattr(f, "verdict_by_topic", {t: Verdict.MISMATCH for t in FLOOD_TOPICS}),
    ),
    # The owner lists the ledger offloaded, and its managed ledger has released the BookKeeper copy.
    "released_bk_copy": lambda f: (
        setattr(f, "in_use_answers", [True]),
        setattr(f, "owner_lists_offloaded", True),
        setattr(f, "bk_copy_released", True),
    ),
}


def _refs(
    name: str, queue: str, request: PendingDeleteLedgerInfo
) -> tuple[PendingDeleteLedgerInfo, list[MessageRef]]:
    """The run's own request and the messages of the case (the first carries the run's request)."""
    if name == "broker_past_limit":
        flood = [replace(request, topic_name=topic) for topic in FLOOD_TOPICS]
        refs = [MessageRef("m-0", queue)]
        refs += [MessageRef(f"m-{i}", queue, request=r) for i, r in enumerate(flood[1:], 1)]
        return flood[0], [*refs, MessageRef("m-broker", queue, request=request, from_system_topic=True)]
    second_request = None
    if name == "joined_other_request":
        request, second_request = replace(request, topic_name=FORGED_TOPIC), request
    second_asks = name == "joined_asks_check"
    return request, [
        MessageRef("m-1", queue),
        MessageRef("m-2", queue, check_ledger_still_in_use=second_asks, request=second_request),
    ]


async def record(prefix: str, address: str = "127.0.0.1:17233", only: str = "") -> None:
    client = await Client.connect(address)
    for name, tweak in CASES.items():
        if only and name != only:
            continue
        fakes = Fakes()
        tweak(fakes)
        queue = f"record-{uuid.uuid4().hex[:6]}"
        with ThreadPoolExecutor(8) as executor:
            async with Worker(
                client,
                task_queue=queue,
                workflows=[LedgerDeletionWorkflow],
                activities=fakes.activities(),
                activity_executor=executor,
            ):
                request = {
                    "offloaded": offload_request(900),
                    "superseded_offload": offload_request(905),
                    "schema_listed_then_deleted": schema_request(902),
                    "joined_asks_check": data_request(903, check_ledger_still_in_use=False),
                }.get(name, data_request(901))
                own, refs = _refs(name, queue, request)
                await Harness(client, queue, fakes).run(own, refs=refs)
        execution = [w async for w in client.list_workflows(f'TaskQueue="{queue}"')][0]
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        (HISTORIES / f"{prefix}{name}.json").write_text(history.to_json())
        print(name, len(history.events), "events")


if __name__ == "__main__":
    asyncio.run(record(f"{sys.argv[1]}-", *sys.argv[2:4]))
