"""Workflow logic on Temporal's test environment, with every activity replaced by name.

Fast: no ZooKeeper, S3 or Pulsar, only the dev server this tier starts for itself (``conftest.py``). Each
test runs a worker on its own task queue with fake activities that record their calls, and checks the
outcome and which activities ran (or did not run).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from ledger_deletion import search_attributes as sa
from ledger_deletion.contracts import (
    DeleteBkLedgerStatus,
    DeletionResult,
    MessageRef,
    Outcome,
    RetrySpec,
    Verdict,
)
from ledger_deletion.request import (
    LedgerComponent,
)
from tests.workflow.support import FORGED_TOPIC, Harness, data_request, offload_request, schema_request
from workflows.ledger_deletion import ADD_MESSAGE_SIGNAL, MAX_JOINED_DECISIONS, LedgerDeletionWorkflow


async def test_unreferenced_ledger_is_deleted_and_its_message_acked(harness: Harness) -> None:
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED
    assert result.messages_acked == 1 and len(harness.fakes.acked) == 1
    assert harness.fakes.calls["delete_bk_ledger"] == 1
    # compare-and-delete uses the version the verification saw
    assert harness.fakes.delete_versions == [1]


async def test_ledger_in_use_during_grace_then_released_is_deleted(harness: Harness) -> None:
    harness.fakes.in_use_answers = [True, False]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.calls["ask_owner_broker"] == 2


async def test_ledger_still_in_use_after_grace_is_kept(harness: Harness) -> None:
    harness.fakes.in_use_answers = [True]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.SKIPPED_IN_USE
    assert harness.fakes.calls["ask_owner_broker"] == 3  # first check + 2 re-checks
    assert harness.fakes.calls["delete_bk_ledger"] == 0
    assert result.messages_acked == 1


async def test_in_use_check_skipped_when_topic_is_gone(harness: Harness) -> None:
    harness.fakes.topic_exists = False
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.calls["ask_owner_broker"] == 0


async def test_in_use_check_skipped_when_request_says_so(harness: Harness) -> None:
    result = await harness.run(data_request(check_ledger_still_in_use=False))
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.calls["ask_owner_broker"] == 0


def kept_for_replay(harness: Harness, result: DeletionResult, why: str) -> None:
    """Dead-lettered after the grace (not acked as in use: the broker will not send it again), then acked."""
    assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "wait_in_use", result
    assert result.reason.startswith("KeptForReplay: ") and why in result.reason
    assert [d.failed_step for d in harness.fakes.dead_letters] == ["wait_in_use"]
    assert harness.fakes.calls["delete_bk_ledger"] == harness.fakes.calls["delete_offload_segment"] == 0
    assert result.messages_acked == 1


async def test_ledger_the_metadata_store_still_lists_is_kept_though_its_owner_dropped_it(
    harness: Harness,
) -> None:
    """The owner answers from memory, which a trim updates before the store; a failed store write leaves the
    ledger listed there, and the next owner loads it from there. The broker will not send the request
    again, so it is kept in the dead-letter topic, not acked as in use."""
    harness.fakes.store_listed = [True]
    result = await harness.run(data_request())
    kept_for_replay(harness, result, "metadata store after 3 checks")
    assert "its owner broker does not list it" in result.reason
    assert harness.fakes.calls["ask_owner_broker"] == 3
    # the first round, then the store read again after each of the owner's three answers
    assert harness.fakes.calls["verify_bk_metadata"] == 4


async def test_ledger_the_metadata_store_drops_during_grace_is_deleted(harness: Harness) -> None:
    harness.fakes.store_listed = [True, True, False]  # the store write lands during the grace
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED
    # compare-and-delete uses the version of the verification that found it no longer listed
    assert harness.fakes.delete_versions == [3]


async def test_a_listing_read_before_the_owners_answer_is_read_again(harness: Harness) -> None:
    """The first round reads the store before the owner is asked: a trim in between is no reason to wait."""
    harness.fakes.store_listed = [True, False]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.calls["ask_owner_broker"] == 1
    assert harness.fakes.delete_versions == [2]


PENDING_ACK_TOPIC = "public/default/orders-sub__transaction_pending_ack"


@pytest.mark.parametrize(
    ("store_lists", "outcome"), [(False, Outcome.DELETED), (True, Outcome.DEAD_LETTERED)]
)
async def test_the_store_decides_a_ledger_of_a_topic_its_owner_cannot_load(
    harness: Harness, store_lists: bool, outcome: Outcome
) -> None:
    """A pending-ack store's managed ledger: the owner refuses to load it as a topic, so it cannot say. A
    trim writes the store before it sends the ledger here: the store's listing decides alone (listed past
    the grace: kept for replay)."""
    harness.fakes.owner_cannot_load = True
    harness.fakes.store_listed = [store_lists]
    result = await harness.run(data_request(topic_name=PENDING_ACK_TOPIC))
    assert result.outcome is outcome
    assert harness.fakes.calls["delete_bk_ledger"] == (0 if store_lists else 1)


async def test_an_offloaded_ledger_of_a_topic_its_owner_cannot_load_is_dead_lettered(
    harness: Harness,
) -> None:
    harness.fakes.owner_cannot_load = True
    request = replace(offload_request(), topic_name=PENDING_ACK_TOPIC)
    result = await harness.run(request)
    assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "ask_owner_broker"
    assert "cannot load" in result.reason and harness.fakes.calls["delete_offload_segment"] == 0
    assert result.messages_acked == 1


@pytest.mark.parametrize("check_asked", [True, False], ids=["topic-gone", "no-check-asked"])
async def test_ledger_the_metadata_store_lists_is_kept_without_an_owner_to_ask(
    harness: Harness, check_asked: bool
) -> None:
    """With the topic gone, or no in-use check asked for, the owner is not asked; the store still counts."""
    harness.fakes.topic_exists = not check_asked  # gone unless the request waives the check
    harness.fakes.store_listed = [True]
    result = await harness.run(data_request(check_ledger_still_in_use=check_asked))
    kept_for_replay(harness, result, "metadata store")
    assert harness.fakes.calls["ask_owner_broker"] == 0
    assert harness.fakes.calls["verify_bk_metadata"] == 3  # first check + 2 re-checks


@pytest.mark.parametrize(
    ("verdict", "outcome"),
    [
        (Verdict.MISMATCH, Outcome.SKIPPED_METADATA_MISMATCH),
        (Verdict.NOT_PULSAR, Outcome.SKIPPED_NOT_PULSAR),
        (Verdict.NOT_FOUND, Outcome.ALREADY_DELETED),
    ],
)
async def test_metadata_verdict_other_than_match_never_deletes(
    harness: Harness, verdict: Verdict, outcome: Outcome
) -> None:
    harness.fakes.verdicts = [verdict]
    result = await harness.run(data_request())
    assert result.outcome is outcome
    assert harness.fakes.calls["delete_bk_ledger"] == 0
    assert result.messages_acked == 1


async def test_changed_znode_is_verified_again_before_delete(harness: Harness) -> None:
    harness.fakes.delete_statuses = [DeleteBkLedgerStatus.VERSION_CHANGED, DeleteBkLedgerStatus.DELETED]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.calls["verify_bk_metadata"] == 2
    assert harness.fakes.delete_versions == [1, 2]


async def test_a_znode_gone_on_a_retried_delete_is_not_reported_deleted(harness: Harness) -> None:
    """The failed attempt's delete, or something else, removed it: the run does not claim it."""
    harness.fakes.delete_statuses = [DeleteBkLedgerStatus.GONE_ON_RETRY]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.ALREADY_DELETED
    assert "not known which" in result.reason and result.messages_acked == 1


async def test_changed_znode_that_no_longer_matches_is_kept(harness: Harness) -> None:
    harness.fakes.verdicts = [Verdict.MATCH, Verdict.MISMATCH]
    harness.fakes.delete_statuses = [DeleteBkLedgerStatus.VERSION_CHANGED]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.SKIPPED_METADATA_MISMATCH
    assert harness.fakes.calls["delete_bk_ledger"] == 1


async def test_changed_znode_is_asked_about_again_before_delete(harness: Harness) -> None:
    """A znode changes when someone writes, closes or recovers the ledger: its owner is asked again."""
    harness.fakes.in_use_answers = [False, True]
    harness.fakes.delete_statuses = [DeleteBkLedgerStatus.VERSION_CHANGED]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.SKIPPED_IN_USE
    assert harness.fakes.calls["ask_owner_broker"] == 1 + 3  # before the first delete, then the grace again
    assert harness.fakes.calls["delete_bk_ledger"] == 1


async def test_schema_ledger_the_registry_lists_is_kept_even_with_its_topic_gone(harness: Harness) -> None:
    harness.fakes.topic_exists = False
    harness.fakes.schema_listed = [True]
    result = await harness.run(schema_request())
    assert result.outcome is Outcome.SKIPPED_IN_USE
    assert "schema locator" in result.reason
    assert harness.fakes.calls["verify_bk_metadata"] == 3  # first check + 2 re-checks
    assert harness.fakes.calls["delete_bk_ledger"] == 0
    assert result.messages_acked == 1


async def test_schema_ledger_the_registry_drops_during_grace_is_deleted(harness: Harness) -> None:
    harness.fakes.schema_listed = [True, False]
    result = await harness.run(schema_request())
    assert result.outcome is Outcome.DELETED
    # compare-and-delete uses the version of the last verification, the one that found it no longer listed
    assert harness.fakes.delete_versions == [2]


async def test_schema_ledger_listed_again_after_a_race_is_kept(harness: Harness) -> None:
    harness.fakes.schema_listed = [False, True]
    harness.fakes.delete_statuses = [DeleteBkLedgerStatus.VERSION_CHANGED]
    result = await harness.run(schema_request())
    assert result.outcome is Outcome.SKIPPED_IN_USE
    assert harness.fakes.calls["delete_bk_ledger"] == 1


async def test_step_that_keeps_failing_is_dead_lettered_then_acked(harness: Harness) -> None:
    harness.fakes.delete_error = "ZooKeeper gone"
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DEAD_LETTERED
    assert result.failed_step == "delete_bk_ledger"
    assert harness.fakes.calls["delete_bk_ledger"] == 3  # max_attempts
    (letter,) = harness.fakes.dead_letters
    assert letter.failed_step == "delete_bk_ledger" and letter.attempts == 3
    assert "ZooKeeper gone" in letter.reason and letter.workflow_id.startswith("ledger-deletion/LEDGER/42")
    assert result.messages_acked == 1


async def test_a_check_that_keeps_failing_is_dead_lettered_with_its_attempts(harness: Harness) -> None:
    """A read-only check runs as a local activity, with the step's own retry policy: out of retries, the
    request is dead-lettered naming the check and its attempts, as for any other step."""
    harness.fakes.topic_failures = 99
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "check_topic"
    assert harness.fakes.calls["check_topic"] == 3  # max_attempts
    (letter,) = harness.fakes.dead_letters
    assert letter.failed_step == "check_topic" and letter.attempts == 3
    assert "AdminApiUnavailable: admin API unavailable" in letter.reason
    assert harness.fakes.calls["delete_bk_ledger"] == 0 and result.messages_acked == 1


async def test_a_check_failing_for_good_is_not_retried(harness: Harness) -> None:
    harness.fakes.topic_failures, harness.fakes.topic_failure_permanent = 1, True
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "check_topic"
    assert harness.fakes.calls["check_topic"] == 1 and harness.fakes.dead_letters[0].attempts == 1


@pytest.mark.parametrize("backoff_seconds", [0.05, 0.6], ids=["in-the-task", "on-a-timer"])
async def test_a_check_that_fails_once_is_retried_in_its_task_or_on_a_timer(
    harness: Harness, backoff_seconds: float
) -> None:
    """A retry due sooner than the local retry threshold runs inside the open workflow task; a later one
    waits on a durable timer, then the check runs again as attempt 2. Either way one marker records it."""
    harness.fakes.topic_failures = 1
    retry = RetrySpec(max_attempts=3, initial_seconds=backoff_seconds, max_interval_seconds=backoff_seconds)
    policy = replace(harness.policy, step_retry={"check_topic": retry}, local_retry_threshold_seconds=0.3)
    handle = await harness.start(data_request(), policy=policy)
    assert (await asyncio.wait_for(handle.result(), timeout=30)).outcome is Outcome.DELETED
    events = (await handle.fetch_history()).events
    assert ("check_topic", 2) in local_activity_markers(events)
    timers = [e for e in events if e.HasField("timer_started_event_attributes")]
    assert len(timers) == (backoff_seconds > policy.local_retry_threshold_seconds)
    # No activity task for a check: only the delete and the ack are scheduled.
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["delete_bk_ledger", "ack_messages"]


async def test_every_message_that_joined_is_acked(harness: Harness) -> None:
    refs = [MessageRef(f"m-{i}", harness.queue) for i in range(3)] + [MessageRef("m-0", harness.queue)]
    harness.fakes.in_use_answers = [True, False]  # keeps the workflow open while the signals arrive
    result = await harness.run(data_request(), refs=refs)
    assert result.outcome is Outcome.DELETED
    assert sorted(harness.fakes.acked) == ["m-0", "m-1", "m-2"]  # the duplicate id is acked once
    assert result.messages_acked == 3


@pytest.mark.parametrize("released", [True, False])
async def test_the_released_bk_copy_of_an_offloaded_ledger_is_deleted(
    harness: Harness, released: bool
) -> None:
    """The owner lists the ledger, offloaded: its reads go to tiered storage. Its BookKeeper copy is deleted
    once the managed ledger says ``bookkeeperDeleted``; until then it is kept, and past the grace kept for
    replay: the broker marks the copy released in memory before the store write, and will not send the
    request again."""
    harness.fakes.in_use_answers = [True]
    harness.fakes.owner_lists_offloaded = True
    harness.fakes.bk_copy_released = released
    result = await harness.run(data_request())
    if released:
        assert result.outcome is Outcome.DELETED
        assert harness.fakes.calls["ask_owner_broker"] == 1 and harness.fakes.calls["delete_bk_ledger"] == 1
        assert harness.fakes.calls["verify_bk_metadata"] == 2  # the first round, then the released check
    else:
        kept_for_replay(harness, result, "has not released its BookKeeper copy")
        assert harness.fakes.calls["verify_bk_metadata"] == 1 + harness.policy.in_use_rechecks + 1


async def test_an_offloaded_listing_protects_the_offloaded_objects(harness: Harness) -> None:
    """For the objects themselves, an offloaded listing under their own uuid is exactly what uses them:
    kept, whatever the BK copy's state (never asked)."""
    harness.fakes.in_use_answers = [True]
    harness.fakes.owner_lists_offloaded = True
    harness.fakes.bk_copy_released = True
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.SKIPPED_IN_USE
    assert (
        harness.fakes.calls["delete_offload_segment"] == 0 and harness.fakes.calls["verify_bk_metadata"] == 0
    )
    assert harness.fakes.calls["check_offload_superseded"] == harness.policy.in_use_rechecks + 1


async def test_offloaded_objects_the_store_still_lists_under_their_uuid_are_kept(harness: Harness) -> None:
    """The owner no longer lists the ledger, the store still does with the request's offload uuid (a trim
    whose store write failed): the next owner would read the ledger from these objects. Kept, and past the
    grace kept for replay; the store is read after each of the owner's answers."""
    harness.fakes.offload_listed = [True]
    result = await harness.run(offload_request())
    kept_for_replay(harness, result, "offloaded under its uuid")
    assert harness.fakes.calls["ask_owner_broker"] == harness.fakes.calls["check_offload_listed"] == 3


async def test_offloaded_objects_the_store_drops_during_the_grace_are_deleted(harness: Harness) -> None:
    harness.fakes.offload_listed = [True, False]  # the store write lands during the grace
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["check_offload_listed"] == 2


async def test_offloaded_objects_of_a_deleted_topic_are_deleted_after_one_store_read(
    harness: Harness,
) -> None:
    harness.fakes.topic_exists = False
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["check_offload_listed"] == 1
    assert harness.fakes.calls["ask_owner_broker"] == 0  # no topic here, no owner to ask


async def test_offloaded_objects_another_store_lists_are_kept_though_the_topic_is_not_ours(
    harness: Harness,
) -> None:
    """Another Pulsar cluster sharing the BookKeeper (and its bucket) lists them: kept through the grace."""
    harness.fakes.topic_exists = False
    harness.fakes.offload_listed = [True]
    result = await harness.run(offload_request())
    kept_for_replay(harness, result, "offloaded under its uuid")
    assert harness.fakes.calls["delete_offload_segment"] == 0


async def test_offloaded_objects_of_an_unknown_namespace_are_skipped(harness: Harness) -> None:
    harness.fakes.topic_exists = False
    harness.fakes.offload_namespace_refusal = (
        "namespace t/ns is known to none of the 2 Pulsar metadata stores"
    )
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE and "known to none" in result.reason
    assert harness.fakes.calls["delete_offload_segment"] == 0 and harness.fakes.acked


async def test_the_offload_delete_is_told_the_unknown_namespace_to_ask_the_tripwire_again(
    harness: Harness,
) -> None:
    """``none``, untripped: the objects may go, but the offload pool asks the tripwire again first."""
    harness.fakes.topic_exists = False
    harness.fakes.offload_unknown_namespace = "gone/ns"
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.DELETED
    assert [d.unknown_namespace for d in harness.fakes.offload_deletes] == ["gone/ns"]


async def test_an_offload_delete_the_tripwire_refuses_is_kept_and_acked(harness: Harness) -> None:
    harness.fakes.topic_exists = False
    harness.fakes.offload_unknown_namespace = "gone/ns"
    harness.fakes.offload_outcome = Outcome.SKIPPED_UNKNOWN_NAMESPACE
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE and result.messages_acked == 1
    assert not harness.fakes.dead_letters


@pytest.mark.parametrize("state", ["OPEN", "IN_RECOVERY"])
async def test_an_open_data_ledger_is_kept_for_replay(harness: Harness, state: str) -> None:
    """Pulsar trims only closed ledgers: an open one is written to (or its writer died mid-rollover)."""
    harness.fakes.states = [state]
    result = await harness.run(data_request())
    kept_for_replay(harness, result, f"ledger 42 is {state} in BookKeeper")


async def test_an_open_data_ledger_older_than_the_newest_listed_is_reported_not_requeued(
    harness: Harness,
) -> None:
    """A broker that died mid-rollover left it OPEN; a topic load recovers only the last listed ledger, so
    nothing closes it: dead-lettered for replay it would come back OPEN for ever. Reported and acked, the
    reason naming the BookKeeper commands that recover and close it."""
    harness.fakes.states = ["OPEN"]
    harness.fakes.newest_listed = 43
    result = await harness.run(data_request(ledger_id=42))
    assert result.outcome is Outcome.SKIPPED_LEFT_OPEN, result
    assert "bin/bookkeeper shell readledger --ledgerid 42 --force-recovery" in result.reason
    assert "ledgermetadata --ledgerid 42" in result.reason
    assert harness.fakes.dead_letters == [] and result.messages_acked == 1
    assert harness.fakes.calls["delete_bk_ledger"] == 0


async def test_an_open_data_ledger_newer_than_the_newest_listed_is_kept_for_replay(harness: Harness) -> None:
    """Newer than every listed one, it may be the ledger a rollover is creating: kept, as before."""
    harness.fakes.states = ["OPEN"]
    harness.fakes.newest_listed = 41
    result = await harness.run(data_request(ledger_id=42))
    kept_for_replay(harness, result, "ledger 42 is OPEN in BookKeeper")


async def test_a_delete_the_tripwire_refuses_is_reported_as_of_an_unknown_namespace(harness: Harness) -> None:
    """Verified while the shared-BookKeeper tripwire was untripped, refused by the bookkeeper pool once it
    tripped: kept, acked, never retried as a failure."""
    harness.fakes.delete_statuses = [DeleteBkLedgerStatus.TRIPPED]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.SKIPPED_UNKNOWN_NAMESPACE, result
    assert "tripwire tripped before the delete" in result.reason and result.messages_acked == 1


async def test_a_data_ledger_closed_during_the_grace_is_deleted(harness: Harness) -> None:
    harness.fakes.states = ["OPEN", "OPEN", "CLOSED"]
    result = await harness.run(data_request())
    assert result.outcome is Outcome.DELETED and harness.fakes.delete_versions == [3]


async def test_an_open_cursor_ledger_is_deleted(harness: Harness) -> None:
    """ManagedCursorImpl.switchToNewLedger deletes the cursor's old ledger without closing it."""
    harness.fakes.states = ["OPEN"]
    request = data_request(ledger_component=LedgerComponent.MANAGED_CURSOR, cursor_name="sub")
    result = await harness.run(request)
    assert result.outcome is Outcome.DELETED


async def test_a_ledger_newer_than_every_listed_one_is_kept_for_replay(harness: Harness) -> None:
    """A rollover creates its ledger before it writes the store: a request for it passes every other check.
    PIP-186's own consumer deferred ids above the highest in use."""
    harness.fakes.newest_listed = 41
    result = await harness.run(data_request(ledger_id=42))
    kept_for_replay(harness, result, "newer than every ledger its owner lists")
    assert "(newest 41)" in result.reason


async def test_a_ledger_older_than_the_newest_listed_one_is_deleted(harness: Harness) -> None:
    harness.fakes.newest_listed = 43
    result = await harness.run(data_request(ledger_id=42))
    assert result.outcome is Outcome.DELETED


async def test_a_young_ledger_is_decided_once_it_is_old_enough(harness: Harness) -> None:
    """Deferred, not refused: one durable timer for the rest of the minimum age, then verified again."""
    harness.fakes.ages = [0.3, 1.6]
    policy = replace(harness.policy, min_ledger_age_seconds=1.5)
    started = time.monotonic()
    result = await harness.run(data_request(), policy=policy)
    assert result.outcome is Outcome.DELETED and time.monotonic() - started >= 1.2
    assert harness.fakes.calls["verify_bk_metadata"] == 2 and harness.fakes.delete_versions == [2]


async def test_an_old_enough_ledger_is_not_deferred(harness: Harness) -> None:
    harness.fakes.ages = [3600.0]
    result = await harness.run(data_request(), policy=replace(harness.policy, min_ledger_age_seconds=60))
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["verify_bk_metadata"] == 1


@pytest.mark.parametrize("offloaded", [True, False])
async def test_the_objects_of_a_replaced_offload_attempt_are_deleted_while_the_ledger_is_listed(
    harness: Harness, offloaded: bool
) -> None:
    """The owner lists the ledger (its new offload complete or still uploading) and its managed ledger
    stores another uuid than the request's: the request's objects are read by nothing, deleted at once."""
    harness.fakes.in_use_answers = [True]
    harness.fakes.owner_lists_offloaded = offloaded
    harness.fakes.offload_superseded = True
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["delete_offload_segment"] == 1
    assert (
        harness.fakes.calls["ask_owner_broker"] == 1 and harness.fakes.calls["check_offload_superseded"] == 1
    )


async def test_a_data_ledger_never_asks_about_offload_attempts(harness: Harness) -> None:
    harness.fakes.in_use_answers = [True]
    harness.fakes.offload_superseded = True  # would be wrong to consult for a BookKeeper ledger
    result = await harness.run(data_request())
    assert result.outcome is Outcome.SKIPPED_IN_USE and harness.fakes.calls["check_offload_superseded"] == 0


@pytest.mark.parametrize("joined_asks", [True, False])
async def test_a_joined_message_asking_for_the_in_use_check_gets_it(
    harness: Harness, joined_asks: bool
) -> None:
    """The run was started by a message with checkLedgerStillInUse=false; a second message for the ledger,
    there before the first round of checks, asks for the check: the owner is asked, and the ledger it still
    uses is kept. Without that second message's ask the run deletes without asking, as the first said."""
    harness.fakes.in_use_answers = [True]
    request = data_request(check_ledger_still_in_use=False)
    second = replace(request, check_ledger_still_in_use=joined_asks)
    refs = [MessageRef("first", harness.queue), MessageRef("second", harness.queue, request=second)]
    result = await harness.run(request, refs=refs, join_in_first_task=True)
    if joined_asks:
        assert result.outcome is Outcome.SKIPPED_IN_USE
        # Both arrived before the decision began: one grace answers both.
        assert harness.fakes.calls["ask_owner_broker"] == harness.policy.in_use_rechecks + 1
        assert harness.fakes.calls["delete_bk_ledger"] == 0
    else:
        assert result.outcome is Outcome.DELETED and harness.fakes.calls["ask_owner_broker"] == 0
    assert sorted(harness.fakes.acked) == ["first", "second"]


async def test_a_message_asking_for_the_check_after_the_first_round_is_answered_by_it(
    harness: Harness,
) -> None:
    """The first round of checks (topic, metadata, owner) runs in the run's first workflow task, so a message
    arriving while it runs comes after the point where the check is asked for: it is the same request,
    answered by the decision (here, deleted without asking, as the run's own message said)."""
    harness.fakes.first_check_stalls_seconds = 1.0  # the second message joins while check_topic runs
    harness.fakes.in_use_answers = [True]
    request = data_request(check_ledger_still_in_use=False)
    handle = await harness.start(request, refs=[MessageRef("first", harness.queue)])

    async def first_round_running() -> None:
        while harness.fakes.calls["check_topic"] < 1:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(first_round_running(), timeout=10)
    second = replace(request, check_ledger_still_in_use=True)
    await harness.join(handle, MessageRef("second", harness.queue, request=second))
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.outcome is Outcome.DELETED and result.decisions == []
    assert harness.fakes.calls["ask_owner_broker"] == 0
    assert sorted(harness.fakes.acked) == ["first", "second"]


async def test_a_message_arriving_after_an_in_use_decision_began_is_decided_again(harness: Harness) -> None:
    """The broker's metadata update after its first send failed, so the ledger stayed listed and the run
    keeps it; the broker's next trim sends the request again, and that update succeeds. The new message
    joins while the run still waits: answers given before it arrived say nothing about it, so it gets a
    decision of its own, which deletes."""
    harness.fakes.in_use_answers = [True, True, True, False]
    request = data_request()
    handle = await harness.start(request)

    async def asked_once() -> None:
        while harness.fakes.calls["ask_owner_broker"] < 1:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(asked_once(), timeout=10)
    await handle.signal(ADD_MESSAGE_SIGNAL, MessageRef("sent-again", harness.queue, request=request))
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert [d.outcome for d in result.decisions] == [Outcome.SKIPPED_IN_USE, Outcome.DELETED]
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["delete_bk_ledger"] == 1
    assert harness.fakes.calls["ask_owner_broker"] == 4
    assert "sent-again" in harness.fakes.acked and result.messages_acked == 2


async def test_a_joined_request_the_run_has_not_decided_is_decided_on_its_own(harness: Harness) -> None:
    """A forged request started the run (its tags do not match: kept); the real one joins while the first
    round runs. It is not answered with the forged one's outcome: it is decided as its own run would decide
    it, and deletes the ledger. The run reports both decisions and, as its outcome, the deletion."""
    harness.fakes.first_check_stalls_seconds = 1.0  # the real request joins while check_topic runs
    harness.fakes.verdict_by_topic = {FORGED_TOPIC: Verdict.MISMATCH}
    real = data_request()
    forged = replace(real, topic_name=FORGED_TOPIC, check_ledger_still_in_use=False)
    refs = [MessageRef("forged", harness.queue), MessageRef("real", harness.queue, request=real)]
    result = await harness.run(forged, refs=refs)
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["delete_bk_ledger"] == 1
    assert [(d.topic_name, d.outcome) for d in result.decisions] == [
        (FORGED_TOPIC, Outcome.SKIPPED_METADATA_MISMATCH),
        (real.topic_name, Outcome.DELETED),
    ]
    assert harness.fakes.acked == ["forged", "real"]  # each once its own request was decided
    assert result.messages_acked == 2


async def test_a_joined_request_whose_step_keeps_failing_is_dead_lettered_as_itself(harness: Harness) -> None:
    """The dead letter carries the joined request, not the run's: replayed, it asks for what its sender
    asked."""
    harness.fakes.first_check_stalls_seconds = 1.0
    harness.fakes.verdict_by_topic = {FORGED_TOPIC: Verdict.MISMATCH}
    harness.fakes.delete_error = "ZooKeeper gone"
    real = data_request()
    forged = replace(real, topic_name=FORGED_TOPIC)
    refs = [MessageRef("forged", harness.queue), MessageRef("real", harness.queue, request=real)]
    result = await harness.run(forged, refs=refs)
    assert result.outcome is Outcome.DEAD_LETTERED and result.failed_step == "delete_bk_ledger"
    (letter,) = harness.fakes.dead_letters
    assert letter.request == real
    assert sorted(harness.fakes.acked) == ["forged", "real"]


async def test_joined_requests_past_the_limit_are_dead_lettered_undecided(harness: Harness) -> None:
    """A flood of distinct requests for one ledger id (a tenant varying the context) cannot grow one run
    without bound: past MAX_JOINED_DECISIONS, a further request is dead-lettered undecided (replayable)
    and its message acked; nothing is lost."""
    harness.fakes.first_check_stalls_seconds = 2.0  # every message joins while the first check runs
    forged = [data_request(topic_name=f"public/default/forged-{i}") for i in range(MAX_JOINED_DECISIONS + 2)]
    harness.fakes.verdict_by_topic = {r.topic_name: Verdict.MISMATCH for r in forged}
    refs = [MessageRef("first", harness.queue)] + [
        MessageRef(f"forged-{i}", harness.queue, request=r) for i, r in enumerate(forged)
    ]
    result = await harness.run(data_request(), refs=refs)
    outcomes = Counter(d.outcome for d in result.decisions)
    assert outcomes == {
        Outcome.DELETED: 1,  # the run's own request
        Outcome.SKIPPED_METADATA_MISMATCH: MAX_JOINED_DECISIONS,
    }
    assert result.joined_dead_lettered == 2  # counted, not listed
    assert [letter.failed_step for letter in harness.fakes.dead_letters] == ["join", "join"]
    assert all(letter.request in forged for letter in harness.fakes.dead_letters)
    assert len(harness.fakes.acked) == len(refs) and result.messages_acked == len(refs)


async def test_the_broker_request_past_the_limit_is_still_decided(harness: Harness) -> None:
    """A tenant floods one ledger id with distinct requests from its own topic; the broker's request for
    that ledger arrives past MAX_JOINED_DECISIONS. It is decided, and deletes, rather than being
    dead-lettered undecided behind the flood; only the flood's overflow goes to the DLQ."""
    harness.fakes.first_check_stalls_seconds = 2.0  # every message joins while the first check runs
    flood = [data_request(topic_name=f"mallory/ns/forged-{i}") for i in range(MAX_JOINED_DECISIONS + 2)]
    harness.fakes.verdict_by_topic = {r.topic_name: Verdict.MISMATCH for r in flood}
    real = data_request()
    refs = [MessageRef("first", harness.queue)]
    refs += [MessageRef(f"forged-{i}", harness.queue, request=r) for i, r in enumerate(flood[1:])]
    refs += [MessageRef("real", harness.queue, request=real, from_system_topic=True)]
    result = await harness.run(flood[0], refs=refs)
    assert harness.fakes.calls["delete_bk_ledger"] == 1
    assert result.outcome is Outcome.DELETED
    assert (real.topic_name, Outcome.DELETED) in [(d.topic_name, d.outcome) for d in result.decisions]
    assert Counter(d.outcome for d in result.decisions) == {
        Outcome.SKIPPED_METADATA_MISMATCH: MAX_JOINED_DECISIONS + 1,  # the run's own and ten joined
        Outcome.DELETED: 1,
    }
    assert result.joined_dead_lettered == 1 and len(harness.fakes.dead_letters) == 1
    assert harness.fakes.dead_letters[0].request in flood  # the overflow is the flood's, not the broker's
    assert len(harness.fakes.acked) == len(refs) and result.messages_acked == len(refs)


async def test_a_joined_request_asking_for_the_check_makes_the_run_ask(harness: Harness) -> None:
    """Any message asking for the in-use check before the check point gets it for the run, whatever request
    it brought: a check never deletes anything."""
    harness.fakes.in_use_answers = [True]
    harness.fakes.verdict_by_topic = {FORGED_TOPIC: Verdict.MISMATCH}
    request = data_request(check_ledger_still_in_use=False)
    other = replace(request, topic_name=FORGED_TOPIC, check_ledger_still_in_use=True)
    refs = [MessageRef("first", harness.queue), MessageRef("other", harness.queue, request=other)]
    # Before the first round of checks, which runs in the first workflow task.
    result = await harness.run(request, refs=refs, join_in_first_task=True)
    assert harness.fakes.calls["delete_bk_ledger"] == 0
    assert [d.outcome for d in result.decisions] == [
        Outcome.SKIPPED_IN_USE,
        Outcome.SKIPPED_METADATA_MISMATCH,
    ]


async def test_joined_copies_of_the_run_request_are_one_decision(harness: Harness) -> None:
    """The same request with other sender properties or another checkLedgerStillInUse is the run's own:
    acked with its outcome, nothing asked twice."""
    harness.fakes.first_check_stalls_seconds = 1.0
    request = data_request()
    copy = replace(request, properties={"sender": "broker-2"}, check_ledger_still_in_use=False)
    refs = [MessageRef("first", harness.queue), MessageRef("copy", harness.queue, request=copy)]
    result = await harness.run(request, refs=refs)
    assert result.outcome is Outcome.DELETED and result.decisions == []
    assert harness.fakes.calls["verify_bk_metadata"] == 1 and harness.fakes.calls["check_topic"] == 1
    assert sorted(harness.fakes.acked) == ["copy", "first"]


async def test_message_whose_holder_is_gone_is_left_for_redelivery(harness: Harness) -> None:
    refs = [MessageRef("held", harness.queue), MessageRef("orphan", f"{harness.queue}-nobody-polls-this")]
    harness.fakes.in_use_answers = [True, False]
    result = await harness.run(data_request(), refs=refs)
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.acked == ["held"]
    assert result.messages_acked == 1 and result.messages_unacked == 1


async def test_offloaded_ledger_goes_to_the_offload_step_only(harness: Harness) -> None:
    result = await harness.run(offload_request())
    assert result.outcome is Outcome.DELETED
    assert result.deleted_keys == ["s3://b/k"]
    assert harness.fakes.calls["delete_offload_segment"] == 1
    assert harness.fakes.calls["verify_bk_metadata"] == 0 and harness.fakes.calls["delete_bk_ledger"] == 0


async def test_status_query_reports_step_and_messages(harness: Harness) -> None:
    harness.fakes.in_use_answers = [True]
    policy = replace(harness.policy, in_use_rechecks=1, in_use_recheck_seconds=3)
    handle = await harness.start(data_request(ledger_id=77), policy=policy)
    for _ in range(50):
        status = await handle.query(LedgerDeletionWorkflow.status)
        if status.step == "wait_in_use":
            break
        await asyncio.sleep(0.1)
    assert status.step == "wait_in_use" and status.messages_collected == 1 and status.messages_acked == 0
    result = await handle.result()
    assert result.outcome is Outcome.SKIPPED_IN_USE
    final = await handle.query(LedgerDeletionWorkflow.status)
    assert final.outcome == "SKIPPED_IN_USE" and final.messages_acked == 1


async def test_a_quick_step_that_hangs_is_retried_after_its_own_timeout(harness: Harness) -> None:
    """A lost or hung attempt of a one-call step is retried after that step's timeout, not after the one
    the slow steps need; every other step keeps the policy's timeout."""
    harness.fakes.first_check_stalls_seconds = 4
    policy = replace(harness.policy, activity_timeout_seconds=30, step_timeout_seconds={"check_topic": 1})
    handle = await harness.start(data_request(ledger_id=79), policy=policy)
    # Before the stalled attempt could have answered, and long before the policy's 30 s.
    result = await asyncio.wait_for(handle.result(), timeout=3.5)
    assert result.outcome is Outcome.DELETED and harness.fakes.calls["check_topic"] == 2
    # The read-only checks run as local activities of the workflow's worker, the rest on their pools' queues.
    assert harness.fakes.runs_as == {
        "check_topic": (1, True),
        "ask_owner_broker": (30, True),
        "verify_bk_metadata": (30, True),
        "delete_bk_ledger": (30, False),
        "ack_messages": (30, False),
    }
    events = (await handle.fetch_history()).events
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert {a.activity_type.name: a.start_to_close_timeout.ToSeconds() for a in scheduled} == {
        "delete_bk_ledger": 30,
        "ack_messages": 30,
    }
    # The worker retried the attempt that timed out: one marker for check_topic, its attempt 2.
    assert sorted(local_activity_markers(events)) == [
        ("ask_owner_broker", 1),
        ("check_topic", 2),
        ("verify_bk_metadata", 1),
    ]


def local_activity_markers(events: Iterable[HistoryEvent]) -> list[tuple[str, int]]:
    """(activity type, attempt) of each local activity's marker: the SDK records both in its ``data``."""
    converter = DataConverter.default.payload_converter
    markers = []
    for event in events:
        if event.HasField("marker_recorded_event_attributes"):
            payload = event.marker_recorded_event_attributes.details["data"].payloads[0]
            data = converter.from_payloads([payload], [dict])[0]
            markers.append((str(data["activity_type"]), int(data["attempt"])))
    return markers


UPSERT_EVENT = "upsert_workflow_search_attributes_event_attributes"


async def test_outcome_attributes_are_written_with_the_completion(harness: Harness) -> None:
    """The outcome rides in the workflow task that completes the run, after the acks: the server then writes
    it with the close record instead of a visibility write of its own."""
    handle = await harness.start(data_request(ledger_id=78))
    assert (await handle.result()).outcome is Outcome.DELETED
    kinds = [event.WhichOneof("attributes") for event in (await handle.fetch_history()).events]
    upserts = [i for i, kind in enumerate(kinds) if kind == UPSERT_EVENT]
    scheduled = [i for i, kind in enumerate(kinds) if kind == "activity_task_scheduled_event_attributes"]
    assert len(upserts) == 1
    assert upserts[0] > scheduled[-1]  # after the ack activity, with the completion:
    assert kinds[upserts[0] + 1] == "workflow_execution_completed_event_attributes"
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(sa.DELETION_OUTCOME) == "DELETED" and attributes.get(sa.DELETION_STEP) == "done"


async def test_message_redelivered_to_a_new_holder_is_acked_by_the_new_holder(harness: Harness) -> None:
    """After a pool restart Pulsar redelivers the same message id to another process: ack it there."""
    dead = f"{harness.queue}-dead-process"
    refs = [MessageRef("m-1", dead), MessageRef("m-1", harness.queue), MessageRef("m-1", harness.queue)]
    harness.fakes.in_use_answers = [True, False]
    result = await harness.run(data_request(), refs=refs)
    assert result.outcome is Outcome.DELETED
    assert harness.fakes.acked == ["m-1"]
    assert result.messages_acked == 1 and result.messages_unacked == 1
