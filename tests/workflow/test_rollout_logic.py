"""The rollout paths of the workflow, with the fake activities: shadow runs (decide, delete nothing), the kill
switch (a refused delete waits for ``resume``), and requests outside a live allow-list (decided in shadow,
dead-lettered for replay). The same paths on the real stack: tests/integration/test_rollout.py."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from temporalio.client import WorkflowHandle

from ledger_deletion import search_attributes as sa
from ledger_deletion.contracts import DeletionResult, DeletionStatus, MessageRef, Mode, Outcome, Step
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.rollout import ALLOW_LIST_STEP
from tests.workflow.support import Harness, data_request, offload_request
from workflows.ledger_deletion import RESUME_SIGNAL, STATUS_QUERY


async def test_a_shadow_run_deletes_nothing_and_says_what_it_would_delete(harness: Harness) -> None:
    result = await harness.run(data_request(ledger_id=4201), mode=Mode.SHADOW)
    assert result.outcome is Outcome.WOULD_DELETE and result.mode is Mode.SHADOW
    assert result.would_delete_keys == [ledger_path(4201, "/ledgers")]
    assert "would compare-and-delete" in result.reason and "znode version 1" in result.reason
    # Every check ran as in live mode; no delete was asked for.
    assert harness.fakes.calls["verify_bk_metadata"] == 1 and harness.fakes.calls["ask_owner_broker"] == 1
    assert harness.fakes.calls["delete_bk_ledger"] == 0
    # Its message (read on the shadow subscription) is acked there.
    assert result.messages_acked == 1


async def test_a_shadow_run_keeps_what_a_live_run_keeps(harness: Harness) -> None:
    harness.fakes.in_use_answers = [True]
    result = await harness.run(data_request(ledger_id=4202), mode=Mode.SHADOW)
    assert result.outcome is Outcome.SKIPPED_IN_USE
    assert result.would_delete_keys == [] and harness.fakes.calls["delete_bk_ledger"] == 0


async def test_a_shadow_run_inspects_offloaded_objects_without_deleting_them(harness: Harness) -> None:
    result = await harness.run(offload_request(4203), mode=Mode.SHADOW)
    assert result.outcome is Outcome.WOULD_DELETE
    assert result.would_delete_keys == ["s3://b/k", "s3://b/k-index"] and result.bytes == 10
    assert harness.fakes.calls["inspect_offload_segment"] == 1
    assert harness.fakes.calls["delete_offload_segment"] == 0


async def test_a_shadow_run_publishes_no_dead_letter(harness: Harness) -> None:
    """Its dead letter, replayed, would reach the live subscription as a new request: it only says so."""
    harness.fakes.topic_failures, harness.fakes.topic_failure_permanent = 1, True
    result = await harness.run(data_request(ledger_id=4204), mode=Mode.SHADOW)
    assert result.outcome is Outcome.WOULD_DEAD_LETTER and result.failed_step == "check_topic"
    assert harness.fakes.dead_letters == [] and result.messages_acked == 1


async def _wait_for_step(handle: WorkflowHandle[object, DeletionResult], step: Step) -> None:
    deadline = time.monotonic() + 20
    while (await handle.query(STATUS_QUERY, result_type=DeletionStatus)).step != step.value:
        assert time.monotonic() < deadline, f"never reached {step.value}"
        await asyncio.sleep(0.1)


async def test_a_paused_delete_waits_visibly_then_deletes_on_resume(harness: Harness) -> None:
    harness.fakes.paused_deletes = 1
    handle = await harness.start(data_request(ledger_id=4205))
    await _wait_for_step(handle, Step.PAUSED)
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(sa.DELETION_STEP) == Step.PAUSED.value
    # Nothing deleted, nothing dead-lettered, nothing acked while it waits; Temporal did not retry it.
    await asyncio.sleep(0.5)
    assert harness.fakes.calls["delete_bk_ledger"] == 1
    assert harness.fakes.dead_letters == [] and harness.fakes.acked == []
    verified_before = harness.fakes.calls["verify_bk_metadata"]

    await handle.signal(RESUME_SIGNAL)
    result = await asyncio.wait_for(handle.result(), timeout=20)
    assert result.outcome is Outcome.DELETED and result.messages_acked == 1
    assert harness.fakes.calls["delete_bk_ledger"] == 2
    # A pause may last hours: the ledger is verified (and its owner asked) again before the delete.
    assert harness.fakes.calls["verify_bk_metadata"] > verified_before
    assert harness.fakes.delete_versions == [harness.fakes.calls["verify_bk_metadata"]]
    assert harness.fakes.dead_letters == []


async def test_a_paused_delete_looks_again_without_a_resume_signal(harness: Harness) -> None:
    """The switch turned off in the Temporal UI sends no signal: the run's backstop timer finds it off."""
    harness.fakes.paused_deletes = 2
    policy = replace(harness.policy, pause_recheck_seconds=0.3, pause_recheck_max_seconds=0.6)
    result = await harness.run(offload_request(4206), policy=policy)
    assert result.outcome is Outcome.DELETED and result.bytes == 10
    assert harness.fakes.calls["delete_offload_segment"] == 3 and harness.fakes.dead_letters == []


async def test_a_request_outside_the_live_allow_list_is_dead_lettered_for_replay(harness: Harness) -> None:
    request = data_request(ledger_id=4207)
    why = "acme/orders is outside the live allow-list (LEDGER_DELETION_LIVE_ALLOW): decided in shadow"
    ref = MessageRef("m-outside", harness.queue, replay_reason=why)
    result = await harness.run(request, refs=[ref], mode=Mode.SHADOW)
    assert result.outcome is Outcome.WOULD_DELETE and result.kept_for_replay == 1
    assert harness.fakes.calls["delete_bk_ledger"] == 0
    (letter,) = harness.fakes.dead_letters
    assert letter.failed_step == ALLOW_LIST_STEP and letter.request == request
    assert letter.reason.startswith(why)
    assert "(in shadow: WOULD_DELETE would compare-and-delete" in letter.reason
    # Dead-lettered before it is acked: the live subscription's message is not lost.
    assert harness.fakes.acked == ["m-outside"]
