"""LedgerDeletionWorkflow: one durable workflow per (ledger type, ledger id).

Deterministic code only. Activities are called by name with an explicit result type, so this module imports
no I/O library (boto3 in a workflow module breaks the sandbox; kazoo and pulsar would be re-imported per run).
This module is the orchestration (the steps, their order, the timers and signals); the pure rules it decides
by (what keeps a ledger, a verdict's outcome, the reasons it gives) are in ``workflows/rules.py``, how it
reads a failed step in ``workflows/failures.py``.

Flow: verify BK metadata ∥ check topic → ask the owner broker whether the ledger is still in use, re-asking
on a durable timer during the in-use grace → compare-and-delete the znode (or delete the offloaded objects)
→ ack every message that joined. Exhausted retries or permanent errors dead-letter the request, which is
then acked as well.

Round trips. The checks only read and are safe to repeat, so they run as local activities, in the workflow
pool's own process, inside the workflow task that asks for them: the first task checks the topic and
verifies the ledger at once, then asks the owner, and schedules the delete; each check costs one
``MarkerRecorded`` event (named by its activity type, with a summary) instead of a scheduled, started and
completed triple and a workflow task of its own. What changes anything (``delete_bk_ledger``,
``delete_offload_segment``, ``publish_dead_letter``) and the ack stay ordinary activities on their pools'
task queues, so the rights to delete stay in those pools, which scale and pause on their own. A happy-path
deletion is then three workflow tasks: the checks and the delete, the ack, the completion.

Versioning. A run replays its history on the code of whichever worker picks it up, so a change to what this
workflow does (its commands and their order, its inputs and results in ``ledger_deletion/contracts.py``)
breaks the runs still open when it rolls out. ``tests/workflow/test_replay.py`` replays one recorded history
per shape of run. Before 1.0 no run exists outside development: change the code, then re-record the
histories (``python -m tests.workflow.record_histories``). From the first release on, every workflow change
is versioned, behind ``workflow.patched("<id>")`` (the old path kept), a new input field with a default, or
a new workflow type, and the new shape gets a history of its own, recorded next to the old ones, which stay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from ledger_deletion import search_attributes as sa
    from ledger_deletion.audit.notes import evidence_json, note_for
    from ledger_deletion.contracts import (
        AckMessagesInput,
        AckMessagesResult,
        AskOwnerBrokerInput,
        AskOwnerBrokerResult,
        AuditNote,
        CheckTopicInput,
        CheckTopicResult,
        DeadLetterInput,
        DeadLetterResult,
        Decision,
        DeleteBkLedgerInput,
        DeleteBkLedgerResult,
        DeleteBkLedgerStatus,
        DeleteOffloadInput,
        DeleteOffloadResult,
        DeletionInput,
        DeletionPolicy,
        DeletionResult,
        DeletionStatus,
        InspectOffloadResult,
        MessageRef,
        Mode,
        OffloadListedInput,
        OffloadListedResult,
        OffloadSupersededInput,
        OffloadSupersededResult,
        Outcome,
        RetrySpec,
        Step,
        Verdict,
        VerifyBkMetadataInput,
        VerifyBkMetadataResult,
    )
    from ledger_deletion.formats.bk_paths import ledger_path
    from ledger_deletion.request import LedgerType, PendingDeleteLedgerInfo, same_decision
    from ledger_deletion.rollout import ALLOW_LIST_STEP
    from workflows.failures import attempts_of, describe, pause_note, retry_policy
    from workflows.rules import (
        COPY_RELEASED_IN_MEMORY,
        GONE_ON_RETRY,
        JOIN_STEP,
        KEPT_FOR_REPLAY,
        MAX_JOINED_DECISIONS,
        MAX_VERSION_RACES,
        STORE_AHEAD,
        Done,
        Finished,
        Kept,
        finish_unless_match,
        listing_of_an_offloaded_copy,
        ref_key,
        unsettled,
        weightiest,
    )

WORKFLOW_NAME = "LedgerDeletionWorkflow"
ADD_MESSAGE_SIGNAL = "add_message"
# Sent by ``ledger-deletion resume`` to every run waiting on the kill switch (DeletionStep=paused).
RESUME_SIGNAL = "resume"
STATUS_QUERY = "status"
_R = TypeVar("_R")


@workflow.defn(name=WORKFLOW_NAME)
class LedgerDeletionWorkflow:
    def __init__(self) -> None:
        self._refs: dict[str, MessageRef] = {}
        self._settled: set[str] = set()
        self._acked = 0
        self._step = Step.CHECK_TOPIC
        self._attempts = 0
        self._last_error = ""
        self._outcome = ""
        self._failed_step: Step | None = None
        self._own_request: PendingDeleteLedgerInfo | None = None
        # Every request decided so far, the run's own first: a joined message is acked once its request is.
        self._decided: list[tuple[PendingDeleteLedgerInfo, Decision]] = []
        # How many decisions had begun when each message arrived (decision i of ``_decided`` is the i-th to
        # begin): an in-use answer covers only the messages that arrived before its decision began.
        self._begun_at_arrival: dict[str, int] = {}
        self._in_decision: PendingDeleteLedgerInfo | None = None  # the request _decide is working on
        self._mode = Mode.LIVE
        # The kill switch: set by the resume signal; the backstop wait, doubled at each look.
        self._resumed = False
        self._pause_wait = 0.0
        # Requests dead-lettered for replay once the live allow-list is widened (MessageRef.replay_reason).
        self._lettered_for_replay: list[PendingDeleteLedgerInfo] = []
        # The audit log's evidence: each step's last answer in the decision under way, and per decision of
        # ``_decided`` its evidence and when it was made; sent with the ack (AuditNote), no event of its own.
        self._evidence: dict[str, str] = {}
        self._evidence_of: list[tuple[dict[str, str], str]] = []
        # The offloaded objects' namespace when this cluster does not have it (check_offload_listed's last
        # answer in the decision under way): the delete asks the tripwire again.
        self._offload_unknown_namespace = ""

    @workflow.signal(name=ADD_MESSAGE_SIGNAL)
    def add_message(self, ref: MessageRef) -> None:
        # A message is acked by the process holding it. Pulsar redelivers a message with the same id to a
        # new holder when the old one dies, so a reference is (holder, id): the same pair twice is one ack.
        key = ref_key(ref)
        if key not in self._refs:
            self._refs[key] = ref
            self._begun_at_arrival[key] = len(self._decided) + (self._in_decision is not None)

    @workflow.signal(name=RESUME_SIGNAL)
    def resume(self) -> None:
        """The kill switch was turned off: a run waiting on it tries its delete again now."""
        self._resumed = True

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> DeletionStatus:
        return DeletionStatus(
            step=self._step.value,
            attempts=self._attempts,
            last_error=self._last_error,
            messages_collected=len(self._refs),
            messages_acked=self._acked,
            outcome=self._outcome,
        )

    # Plain methods, not queries: the observability interceptor calls them inside the workflow, so the
    # activities of a joined request's decision and its outcome count for that request's tenant and component.

    def request_in_decision(self) -> PendingDeleteLedgerInfo | None:
        """The request being decided (a joined one while it is), or None between decisions."""
        return self._in_decision

    def decided_requests(self) -> list[tuple[PendingDeleteLedgerInfo, Outcome]]:
        """Every request this run decided, the run's own first, with its own outcome."""
        return [(request, decision.outcome) for request, decision in self._decided]

    @workflow.run
    async def run(self, inp: DeletionInput) -> DeletionResult:
        request, policy = inp.request, inp.policy
        self._own_request, self._mode = request, inp.mode
        self.add_message(inp.first_message)
        await self._decide(request, policy)
        unacked = await self._ack_all(policy)
        self._step = Step.DONE
        everything = [decision for _, decision in self._decided]
        final = weightiest(everything)
        _publish_outcome(final)
        # Requests dead-lettered past the limit are counted, not listed: the result stays small.
        decisions = [d for d in everything if d.failed_step != JOIN_STEP]
        return DeletionResult(
            outcome=final.outcome,
            ledger_id=request.ledger_id,
            ledger_type=request.ledger_type.value,
            reason=final.reason,
            failed_step=final.failed_step,
            messages_acked=self._acked,
            messages_unacked=unacked,
            deleted_keys=final.deleted_keys,
            decisions=decisions if len(everything) > 1 else [],
            joined_dead_lettered=len(everything) - len(decisions),
            mode=self._mode,
            would_delete_keys=final.would_delete_keys,
            bytes=final.bytes,
            kept_for_replay=len(self._lettered_for_replay),
        )

    async def _decide(
        self, request: PendingDeleteLedgerInfo, policy: DeletionPolicy, *, from_system_topic: bool = False
    ) -> Decision:
        """Decide one request: deleted, skipped, or dead-lettered (published to the DLQ before any ack).
        Past ``MAX_JOINED_DECISIONS`` joined requests, a further one is dead-lettered undecided, unless it
        came from the system topic."""
        self._failed_step, self._attempts, self._last_error, self._outcome = None, 0, "", ""
        failed_step = ""
        self._in_decision = request
        self._evidence = {}
        self._tell(f"checking {request.topic_name} and ledger {request.ledger_id}")
        if len(self._decided) > MAX_JOINED_DECISIONS and not from_system_topic:
            failed_step = JOIN_STEP
            reason = (
                f"more than {MAX_JOINED_DECISIONS} other requests for this ledger joined one run: "
                "not decided there; replay it"
            )
            done = Done(await self._give_up(request, policy, reason, failed_step, 0), reason)
        else:
            try:
                done = await self._delete(request, policy)
            except Finished as finished:
                done = Done(finished.outcome, finished.reason)
            except (ActivityError, ApplicationError) as err:
                step = self._failed_step or self._step
                failed_step, reason, attempts = step.value, describe(err), attempts_of(err, policy, step)
                self._attempts, self._last_error = attempts, reason
                done = Done(await self._give_up(request, policy, reason, failed_step, attempts), reason)
        decision = Decision(
            request.summary(),
            request.topic_name,
            done.outcome,
            done.reason,
            failed_step,
            done.deleted_keys,
            done.would_delete_keys,
            done.bytes,
        )
        self._decided.append((request, decision))
        self._evidence_of.append((self._evidence, workflow.now().isoformat()))
        self._in_decision = None
        self._outcome = weightiest([d for _, d in self._decided]).outcome.value
        self._tell("\n".join(f"{d.request}: {d.outcome.value} {d.reason}".strip() for _, d in self._decided))
        return decision

    def _tell(self, what: str) -> None:
        """The run's current details in the Temporal UI (no history event): what it does or waits for now."""
        workflow.set_current_details(f"[shadow] {what}" if self._mode is Mode.SHADOW else what)

    async def _give_up(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, reason: str, step: str, attempts: int
    ) -> Outcome:
        """A request that cannot be decided: dead-lettered in live mode. A shadow run only says it would be:
        its dead letter, replayed, would reach the live subscription as a new request."""
        if self._mode is Mode.SHADOW:
            return Outcome.WOULD_DEAD_LETTER
        await self._dead_letter(req, policy, reason, step, attempts)
        return Outcome.DEAD_LETTERED

    # --- deletion ------------------------------------------------------------------------------------------

    async def _delete(self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy) -> Done:
        if req.ledger_type is LedgerType.LEDGER:
            # Both are read-only and independent: one workflow task schedules both.
            topic, verified = await asyncio.gather(
                self._check_topic(req, policy),
                self._verify(req, policy),
            )
            finish_unless_match(verified)
            verified = await self._wait_until_old_enough(req, policy, verified)
            verified = await self._wait_until_schema_releases(req, policy, verified)
            verified = await self._wait_until_bk_ledger_unused(req, policy, topic, verified)
            return await self._delete_bk_ledger(req, policy, verified, topic)
        topic = await self._check_topic(req, policy)
        await self._wait_until_unused(req, policy, topic)
        assert req.context is not None  # validated when the request was decoded
        objects = DeleteOffloadInput(req.ledger_id, req.managed_ledger_name, req.context)
        if self._mode is Mode.SHADOW:
            self._tell(f"finding the offloaded objects of ledger {req.ledger_id} a live run would delete")
            seen = await self._activity(
                Step.INSPECT_OFFLOAD_SEGMENT,
                objects,
                InspectOffloadResult,
                policy.offload_queue,
                policy,
                f"objects of ledger {req.ledger_id} of {req.managed_ledger_name} (HEAD only)",
            )
            return Done(seen.outcome, seen.reason, would_delete_keys=seen.keys, bytes=seen.bytes)
        while True:
            self._tell(f"deleting the offloaded objects of ledger {req.ledger_id}")
            result = await self._destructive(
                Step.DELETE_OFFLOAD_SEGMENT,
                # The namespace as the latest check found it: the offload pool asks the tripwire again.
                replace(objects, unknown_namespace=self._offload_unknown_namespace),
                DeleteOffloadResult,
                policy.offload_queue,
                policy,
                f"objects of ledger {req.ledger_id} of {req.managed_ledger_name}",
            )
            if result is not None:
                return Done(result.outcome, result.reason, result.deleted_keys, bytes=result.bytes)
            # Resumed after a pause: what was checked before it may have changed since; check again.
            await self._wait_until_unused(req, policy, topic)

    async def _check_topic(self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy) -> CheckTopicResult:
        return await self._check(
            Step.CHECK_TOPIC,
            CheckTopicInput(req.topic_name),
            CheckTopicResult,
            policy,
            f"{req.topic_name}, for ledger {req.ledger_id}",
        )

    async def _verify(
        self,
        req: PendingDeleteLedgerInfo,
        policy: DeletionPolicy,
        *,
        check_bk_copy_released: bool = False,
        owner_listed_digest: str = "",
    ) -> VerifyBkMetadataResult:
        return await self._check(
            Step.VERIFY_BK_METADATA,
            VerifyBkMetadataInput(req, check_bk_copy_released, owner_listed_digest),
            VerifyBkMetadataResult,
            policy,
            f"ledger {req.ledger_id} of {req.topic_name}"
            + (", its BookKeeper copy released?" if check_bk_copy_released else ""),
        )

    async def _verified(self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy) -> VerifyBkMetadataResult:
        """Verify the ledger again; one that is no longer the ledger requested ends the decision with its
        verdict's outcome (``Finished``)."""
        return finish_unless_match(await self._verify(req, policy))

    async def _wait_until_unused(
        self,
        req: PendingDeleteLedgerInfo,
        policy: DeletionPolicy,
        topic: CheckTopicResult,
        verified: VerifyBkMetadataResult | None = None,
    ) -> VerifyBkMetadataResult | None:
        """The mark phase publishes before it updates metadata: give the broker a grace period to catch up.

        What the ledger (``verified`` given) or the offloaded objects are kept for, at each check:
        - the owner broker still references it (when asked): it trims it later and sends a new request, so
          one still referenced after the grace is acked as in use;
        - Pulsar's metadata store lists it (an offload under the request's uuid), whatever the owner says:
          the owner answers from memory, which a trim updates before the store, and the next owner loads it
          from the store. The store is read after the owner's answer, so a trim under way is seen;
        - a BookKeeper ledger still open, or newer than every ledger its owner lists in the store.
        Past the grace these three are dead-lettered, not acked (``Kept.replay_when``). Returns the latest
        verification.
        """
        owner_check = topic.exists and self._in_use_check_wanted(req)
        # Whether or not the topic still exists here: another store sharing the BookKeeper may list the
        # objects, and their namespace may be another cluster's (check_offload_listed).
        offload_store_check = req.ledger_type is LedgerType.OFFLOAD_LEDGER
        settled = verified is None or not (verified.metadata_store_listing or unsettled(req, verified))
        if not owner_check and not offload_store_check and settled:
            return verified
        latest = verified

        async def referenced(check: int) -> Kept | None:
            nonlocal latest
            if owner_check and (kept := await self._owner_reference(req, policy, latest is not None)):
                return kept
            if latest is not None:
                # A listing goes away and a ledger settles (closed, listed below a newer one), never back:
                # only what kept the ledger is read again, when it was read before the owner's answer or
                # before a wait.
                if not (latest.metadata_store_listing or unsettled(req, latest)):
                    return None
                if owner_check or check:
                    latest = await self._verified(req, policy)
                if latest.metadata_store_listing:
                    return Kept(latest.metadata_store_listing, resent=False, replay_when=STORE_AHEAD)
                return unsettled(req, latest)
            if offload_store_check:
                listed = await self._check(
                    Step.CHECK_OFFLOAD_LISTED,
                    OffloadListedInput(req),
                    OffloadListedResult,
                    policy,
                    f"ledger {req.ledger_id} in {req.managed_ledger_name}",
                )
                if listed.namespace_refusal:
                    raise Finished(Outcome.SKIPPED_UNKNOWN_NAMESPACE, listed.namespace_refusal)
                self._offload_unknown_namespace = listed.unknown_namespace
                if listed.listing:
                    return Kept(listed.listing, resent=False, replay_when=STORE_AHEAD)
            return None

        await self._wait_out_grace(req, policy, referenced)
        return latest

    async def _owner_reference(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, store_decides: bool
    ) -> Kept | None:
        """How the topic's owner broker still references the ledger, or None when it does not.

        An owner that refuses to load the topic (a transaction-internal managed ledger) cannot say. For a
        BookKeeper ledger (``store_decides``) Pulsar's metadata store then decides alone: a trim and a cursor
        switch write the store before they act on the ledger, so a ledger the store does not list is not
        referenced. Anything else is dead-lettered.
        """
        answer = await self._check(
            Step.ASK_OWNER_BROKER,
            AskOwnerBrokerInput(req.topic_name, req.ledger_id),
            AskOwnerBrokerResult,
            policy,
            f"ledger {req.ledger_id} in {req.topic_name}",
        )
        if answer.owner_cannot_load:
            if store_decides:
                return None
            raise ApplicationError(
                f"the owner broker cannot load {req.topic_name} (a transaction-internal managed ledger), so "
                "it cannot say whether its offloaded ledger is in use",
                type="OwnerCannotLoadTopic",
                non_retryable=True,
            )
        if not answer.in_use:
            return None
        if await self._bk_copy_released(req, policy, answer) or await self._offload_superseded(
            req, policy, answer
        ):
            return None
        if listing_of_an_offloaded_copy(req, answer):
            # The owner reads the ledger from tiered storage; the store has not released its BookKeeper
            # copy (bookkeeperDeleted) that the request is for.
            return Kept(
                f"{req.topic_name} reads it from tiered storage, yet Pulsar's metadata store has not "
                "released its BookKeeper copy",
                resent=False,
                replay_when=COPY_RELEASED_IN_MEMORY,
            )
        owner = f" on its owner broker {answer.owner_url}" if answer.owner_url else ""
        return Kept(
            f"still referenced by {req.topic_name} ({answer.referenced_as}){owner}",
            resent=True,
            owner=answer.owner_url,
        )

    async def _wait_until_bk_ledger_unused(
        self,
        req: PendingDeleteLedgerInfo,
        policy: DeletionPolicy,
        topic: CheckTopicResult,
        verified: VerifyBkMetadataResult,
    ) -> VerifyBkMetadataResult:
        latest = await self._wait_until_unused(req, policy, topic, verified)
        assert latest is not None  # given a verification, it returns the latest one
        return latest

    async def _bk_copy_released(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, answer: AskOwnerBrokerResult
    ) -> bool:
        """Is the owner's listing only of the ledger's offloaded copy? It lists an offloaded ledger until
        retention trims it, reading it from tiered storage; once its ManagedLedgerInfo also says
        ``bookkeeperDeleted`` the broker has given up the BookKeeper copy, which this request may delete.
        Only for the BookKeeper copy of a data ledger."""
        if not listing_of_an_offloaded_copy(req, answer):
            return False
        released = await self._verify(
            req, policy, check_bk_copy_released=True, owner_listed_digest=answer.listed_digest
        )
        return released.verdict is Verdict.MATCH and released.bk_copy_released

    async def _offload_superseded(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, answer: AskOwnerBrokerResult
    ) -> bool:
        """The owner lists the ledger: does its ManagedLedgerInfo (read from Pulsar's metadata store, with the
        owner's ledger list) store another offload uuid than the request's? A broker that replaces a failed
        offload attempt sends that attempt's objects here while it still lists the ledger, now under the new
        attempt's uuid; those objects are read by nothing. Only for a classic offload (one uuid per
        ledger)."""
        offload = req.context.offload_context if req.context else None
        if not (
            req.ledger_type is LedgerType.OFFLOAD_LEDGER
            and answer.referenced_as == "ledgers"
            and offload is not None
            and offload.has_uid
        ):
            return False
        checked = await self._check(
            Step.CHECK_OFFLOAD_SUPERSEDED,
            OffloadSupersededInput(req, answer.listed_digest),
            OffloadSupersededResult,
            policy,
            f"ledger {req.ledger_id} in {req.managed_ledger_name}",
        )
        return checked.superseded

    def _in_use_check_wanted(self, req: PendingDeleteLedgerInfo) -> bool:
        """Asked for by the request, or by any message that joined before this point (whatever request it
        brought: one message saying "check" is enough, and a check never deletes)."""
        return req.check_ledger_still_in_use or any(
            self._request_of(ref).check_ledger_still_in_use for ref in self._refs.values()
        )

    async def _wait_until_schema_releases(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, verified: VerifyBkMetadataResult
    ) -> VerifyBkMetadataResult:
        """A schema ledger the schema registry still lists is in use, even with its topic gone: wait for the
        broker to drop it from the locator (it publishes before it updates, as for other ledgers), checking
        the metadata again each time. Applies whatever ``checkLedgerStillInUse`` says: a listed ledger is
        referenced, and deleting it would break the schema."""
        latest = verified

        async def listed(check: int) -> Kept | None:
            nonlocal latest
            if check:  # the first answer is the verification already made
                latest = await self._verified(req, policy)
            # The locator is the schema registry's only record: a delete whose update failed failed, and the
            # one deleting the schema asks again.
            return Kept(latest.reason, resent=True) if latest.schema_referenced else None

        await self._wait_out_grace(req, policy, listed)
        return latest

    async def _wait_out_grace(
        self,
        req: PendingDeleteLedgerInfo,
        policy: DeletionPolicy,
        referenced: Callable[[int], Awaitable[Kept | None]],
    ) -> None:
        """Ask ``referenced`` (what still keeps the ledger, or None) up to ``in_use_rechecks`` more times on
        a durable timer. Still kept after the last: acked as in use (SKIPPED_IN_USE) when the broker will
        send the request again; otherwise dead-lettered with why (``KeptForReplay``), to be replayed."""
        for check in range(policy.in_use_rechecks + 1):
            kept = await referenced(check)
            if kept is None:
                return
            if check == policy.in_use_rechecks:
                where = f"{kept.where} after {check + 1} checks"
                if kept.resent:
                    raise Finished(Outcome.SKIPPED_IN_USE, where)
                if kept.report_as is not None:
                    raise Finished(kept.report_as, f"{where}: {kept.replay_when}")
                self._step = Step.WAIT_IN_USE
                raise ApplicationError(
                    f"{where}: {kept.replay_when}", type=KEPT_FOR_REPLAY, non_retryable=True
                )
            self._step = Step.WAIT_IN_USE
            waiting = (
                f"waiting for broker {kept.owner} to release ledger {req.ledger_id}"
                if kept.owner
                else f"waiting for ledger {req.ledger_id} to be released"
            )
            self._tell(
                f"{waiting} ({kept.where}); asking again in {policy.in_use_recheck_seconds:g} s, "
                f"re-check {check + 1} of {policy.in_use_rechecks}"
            )
            if check == 0:
                workflow.upsert_search_attributes([sa.DELETION_STEP.value_set(Step.WAIT_IN_USE.value)])
            await workflow.sleep(
                timedelta(seconds=policy.in_use_recheck_seconds), summary=Step.WAIT_IN_USE.value
            )

    async def _wait_until_old_enough(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, verified: VerifyBkMetadataResult
    ) -> VerifyBkMetadataResult:
        """A ledger younger than ``min_ledger_age_seconds`` is decided once it is that old (one durable
        timer, then verified again): a rollover creates its ledger before it lists it in the store, and a
        request for a ledger that new is early or wrong. Deferred, not refused: age passes by itself. The
        wait is at most the minimum age, whatever the metadata's clock says; then the other rules decide."""
        age = verified.age_seconds
        if age is None or age >= policy.min_ledger_age_seconds:
            return verified
        self._step = Step.WAIT_LEDGER_AGE
        self._tell(
            f"waiting until ledger {req.ledger_id} is {policy.min_ledger_age_seconds:g} s old (created "
            f"{age:.0f} s ago), then verifying it again"
        )
        workflow.upsert_search_attributes([sa.DELETION_STEP.value_set(Step.WAIT_LEDGER_AGE.value)])
        await workflow.sleep(
            timedelta(seconds=policy.min_ledger_age_seconds - age), summary=Step.WAIT_LEDGER_AGE.value
        )
        return await self._verified(req, policy)

    async def _delete_bk_ledger(
        self,
        req: PendingDeleteLedgerInfo,
        policy: DeletionPolicy,
        verified: VerifyBkMetadataResult,
        topic: CheckTopicResult,
    ) -> Done:
        races = 0
        while True:
            path = ledger_path(req.ledger_id, policy.bk_ledgers_root)
            size = f"{verified.length} bytes by its BookKeeper metadata"
            if self._mode is Mode.SHADOW:
                # Every check passed: a live run would now compare-and-delete this znode at this version.
                evidence = (
                    f"would compare-and-delete {path} at znode version {verified.znode_version}; {size}"
                )
                return Done(Outcome.WOULD_DELETE, evidence, would_delete_keys=[path], bytes=verified.length)
            self._tell(f"deleting ledger {req.ledger_id}: {path} at znode version {verified.znode_version}")
            deleted = await self._destructive(
                Step.DELETE_BK_LEDGER,
                DeleteBkLedgerInput(req.ledger_id, verified.znode_version, verified.unknown_namespace),
                DeleteBkLedgerResult,
                policy.bookkeeper_queue,
                policy,
                f"ledger {req.ledger_id} of {req.topic_name} at znode version {verified.znode_version}",
            )
            if deleted is not None:
                if deleted.status is DeleteBkLedgerStatus.DELETED:
                    return Done(Outcome.DELETED, "", bytes=verified.length)
                if deleted.status is DeleteBkLedgerStatus.ALREADY_DELETED:
                    return Done(Outcome.ALREADY_DELETED, "znode disappeared before delete")
                if deleted.status is DeleteBkLedgerStatus.GONE_ON_RETRY:
                    return Done(Outcome.ALREADY_DELETED, GONE_ON_RETRY)
                if deleted.status is DeleteBkLedgerStatus.TRIPPED:
                    return Done(
                        Outcome.SKIPPED_UNKNOWN_NAMESPACE,
                        f"namespace {verified.unknown_namespace} is not this cluster's and the "
                        "shared-BookKeeper tripwire tripped before the delete",
                    )
                # The znode changed since we checked it: what we verified is no longer what we would delete.
                races += 1
            # Changed, or resumed after a pause (which may have lasted long enough for anything to change):
            # verify again, and ask again whatever keeps a ledger; a ledger's metadata changes when someone
            # writes, closes or recovers it.
            verified = await self._verified(req, policy)
            verified = await self._wait_until_schema_releases(req, policy, verified)
            verified = await self._wait_until_bk_ledger_unused(req, policy, topic, verified)
            if races == MAX_VERSION_RACES:
                raise ApplicationError(
                    f"ledger {req.ledger_id} metadata changed {MAX_VERSION_RACES} times during deletion",
                    type="MetadataKeepsChanging",
                    non_retryable=True,
                )

    def _request_of(self, ref: MessageRef) -> PendingDeleteLedgerInfo:
        """The request a message brought; the first message carries none: its request is the run's input."""
        assert self._own_request is not None  # set first thing in run
        return ref.request if ref.request is not None else self._own_request

    def _is_decided(self, ref: MessageRef) -> bool:
        """Has this run decided the message's request?

        A decision that kept the ledger as in use answers only the messages that arrived before it began:
        the broker sends a request again after the metadata update of its first send failed, and the
        update of the new send may have succeeded, so a message arriving later is decided again (with its
        own grace).
        """
        request = self._request_of(ref)
        arrived_after = self._begun_at_arrival.get(ref_key(ref), 0)
        same = [
            (decision, number)
            for number, (decided, decision) in enumerate(self._decided, 1)
            if same_decision(request, decided)
        ]
        return any(d.outcome is not Outcome.SKIPPED_IN_USE or number > arrived_after for d, number in same)

    # --- dead letter and acks ------------------------------------------------------------------------------

    async def _dead_letter(
        self, req: PendingDeleteLedgerInfo, policy: DeletionPolicy, reason: str, step: str, attempts: int
    ) -> None:
        self._step = Step.PUBLISH_DEAD_LETTER
        self._tell(f"dead-lettering the request for ledger {req.ledger_id} (failed step {step}): {reason}")
        # The request must end somewhere: keep trying to publish it (the message stays unacked meanwhile).
        forever = RetrySpec(
            0, policy.default_retry.initial_seconds, policy.default_retry.max_interval_seconds
        )
        await workflow.execute_activity(
            Step.PUBLISH_DEAD_LETTER.value,
            DeadLetterInput(req, reason, step, attempts, workflow.info().workflow_id),
            result_type=DeadLetterResult,
            task_queue=policy.pulsar_queue,
            start_to_close_timeout=timedelta(seconds=policy.timeout_seconds_for(Step.PUBLISH_DEAD_LETTER)),
            retry_policy=retry_policy(forever),
            summary=(
                f"{Step.PUBLISH_DEAD_LETTER.value}: ledger {req.ledger_id} of {req.topic_name}, "
                f"failed step {step}"
            )[:200],
        )

    async def _ack_all(self, policy: DeletionPolicy) -> int:
        """Ack every message that joined, including ones that arrive while we ack. Returns holders lost."""
        lost = 0
        while True:
            self._step = Step.ACK_MESSAGES
            await workflow.wait_condition(workflow.all_handlers_finished)
            waiting = [ref for key, ref in self._refs.items() if key not in self._settled]
            if not waiting:
                return lost
            pending = [ref for ref in waiting if self._is_decided(ref)]
            if not pending:
                # Only messages whose request this run has not decided: decide the first such request as a
                # run of its own would, then ack its messages on the next turn.
                undecided = self._request_of(waiting[0])
                from_system_topic = any(
                    ref.from_system_topic
                    for ref in waiting
                    if same_decision(self._request_of(ref), undecided)
                )
                await self._decide(undecided, policy, from_system_topic=from_system_topic)
                continue
            await self._letter_for_replay(pending, policy)
            self._tell(f"acking {len(pending)} message(s)")
            by_queue: dict[str, list[MessageRef]] = defaultdict(list)
            for ref in pending:
                by_queue[ref.ack_queue].append(ref)
            results = await asyncio.gather(
                *(self._ack(queue, refs, policy) for queue, refs in by_queue.items())
            )
            for refs, acked in zip(by_queue.values(), results, strict=True):
                self._settled.update(ref_key(ref) for ref in refs)
                if acked is None:
                    lost += len(refs)
                else:
                    self._acked += len(refs)

    async def _letter_for_replay(self, refs: list[MessageRef], policy: DeletionPolicy) -> None:
        """Before a live process's messages outside its live allow-list are acked: their requests, decided in
        shadow, go to the dead-letter topic with why, once each, to be replayed when the list is widened."""
        for ref in refs:
            request = self._request_of(ref)
            if not ref.replay_reason or any(same_decision(request, r) for r in self._lettered_for_replay):
                continue
            decided = [d for r, d in self._decided if same_decision(request, r)]
            shadow = f" (in shadow: {decided[-1].outcome.value} {decided[-1].reason}".rstrip() + ")"
            reason = ref.replay_reason + (shadow if decided else "")
            await self._dead_letter(request, policy, reason, ALLOW_LIST_STEP, 0)
            self._lettered_for_replay.append(request)

    def _audit_note(self, ref: MessageRef) -> AuditNote:
        """The audit log's record of a decided message: its request's latest decision, with its evidence."""
        request = self._request_of(ref)
        number = max(i for i, (r, _) in enumerate(self._decided) if same_decision(request, r))
        evidence, decided_at = self._evidence_of[number]
        return note_for(ref, request, self._decided[number][1], evidence, decided_at, self._mode)

    async def _ack(
        self, queue: str, refs: list[MessageRef], policy: DeletionPolicy
    ) -> AckMessagesResult | None:
        assert self._own_request is not None  # set first thing in run
        ids = [r.message_id for r in refs]
        # One ledger: every message of a run asks for the ledger its workflow id names.
        subject = f"{len(ids)} message(s) for ledger {self._own_request.ledger_id}, held by {queue}"
        try:
            result: AckMessagesResult = await workflow.execute_activity(
                Step.ACK_MESSAGES.value,
                # The acking process makes each note durable in the audit log before it acks.
                AckMessagesInput(ids, [self._audit_note(r) for r in refs]),
                result_type=AckMessagesResult,
                task_queue=queue,
                # Only the receiving process can ack. If it is gone, Pulsar redelivers its messages to another
                # consumer and they end in a new run (every step is idempotent); if it is alive but could not
                # poll in time, its ingest sweeper acks them once this run has completed.
                schedule_to_start_timeout=timedelta(seconds=policy.ack_schedule_to_start_seconds),
                start_to_close_timeout=timedelta(seconds=policy.timeout_seconds_for(Step.ACK_MESSAGES)),
                retry_policy=RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)),
                summary=f"{Step.ACK_MESSAGES.value}: {subject}"[:200],
            )
            return result
        except ActivityError as err:
            workflow.logger.warning("ack of %d message(s) on %s failed: %s", len(ids), queue, describe(err))
            return None

    async def _activity(
        self, step: Step, arg: Any, result_type: type[_R], queue: str, policy: DeletionPolicy, subject: str
    ) -> _R:
        """A step on the task queue of the pool that holds the right to it (to delete, or to read S3);
        ``subject`` names what it acts on in its summary."""
        self._step = step
        try:
            result: _R = await workflow.execute_activity(
                step.value,
                arg,
                result_type=result_type,
                task_queue=queue,
                start_to_close_timeout=timedelta(seconds=policy.timeout_seconds_for(step)),
                retry_policy=retry_policy(policy.retry_for(step)),
                summary=f"{step.value}: {subject}"[:200],
            )
            self._evidence[step.value] = evidence_json(result, workflow.now().isoformat())
            return result
        except ActivityError as err:
            if pause_note(err) is None:  # the kill switch is no failure of the step
                self._failed(step, err)
            raise

    async def _destructive(
        self, step: Step, arg: Any, result_type: type[_R], queue: str, policy: DeletionPolicy, subject: str
    ) -> _R | None:
        """A delete; None when the kill switch refused it and the run has waited until it was turned off.

        The check is the activity's own, at its start (``DeletionPaused``, never retried by Temporal), so a
        run that is not paused pays nothing for it. The caller checks the ledger again before it retries:
        a pause may last hours.
        """
        try:
            return await self._activity(step, arg, result_type, queue, policy, subject)
        except ActivityError as err:
            note = pause_note(err)
            if note is None:
                raise
        previous = self._step
        self._step = Step.PAUSED
        self._tell(
            f"paused: {note}. The delete waits for `ledger-deletion resume` (it looks again in "
            f"{self._pause_backstop(policy):g} s if no resume comes)"
        )
        workflow.upsert_search_attributes([sa.DELETION_STEP.value_set(Step.PAUSED.value)])
        self._resumed = False
        # Past the backstop, try again all the same: the activity says whether the switch is still on.
        with contextlib.suppress(asyncio.TimeoutError):  # noqa: UP041 - TimeoutError is Temporal's here
            await workflow.wait_condition(
                lambda: self._resumed,
                timeout=timedelta(seconds=self._pause_backstop(policy)),
                timeout_summary=Step.PAUSED.value,
            )
        self._pause_wait = min(self._pause_backstop(policy) * 2, policy.pause_recheck_max_seconds)
        self._step = previous
        return None

    def _pause_backstop(self, policy: DeletionPolicy) -> float:
        return self._pause_wait or policy.pause_recheck_seconds

    async def _check(
        self, step: Step, arg: Any, result_type: type[_R], policy: DeletionPolicy, subject: str
    ) -> _R:
        """A read-only step, as a local activity of the workflow pool (the module docstring says why), with
        the step's own timeout and retry policy; ``subject`` names what it checks in its marker's summary."""
        self._step = step
        try:
            result: _R = await workflow.execute_local_activity(
                step.value,
                arg,
                result_type=result_type,
                start_to_close_timeout=timedelta(seconds=policy.timeout_seconds_for(step)),
                retry_policy=retry_policy(policy.retry_for(step)),
                local_retry_threshold=timedelta(seconds=policy.local_retry_threshold_seconds),
                summary=f"{step.value}: {subject}"[:200],
            )
            self._evidence[step.value] = evidence_json(result, workflow.now().isoformat())
            return result
        except (ActivityError, ApplicationError) as err:
            # A local activity out of retries raises its last error itself (an ApplicationError), a timed out
            # one an ActivityError around a TimeoutError.
            self._failed(step, err)
            raise

    def _failed(self, step: Step, err: ActivityError | ApplicationError) -> None:
        # With steps running in parallel, the first one to fail is the one to report.
        self._failed_step = self._failed_step or step
        self._last_error = describe(err)


def _publish_outcome(final: Decision) -> None:
    """Make the outcome searchable (``DeletionOutcome``, ``DeletionStep``, ``DeletionBytes``).

    Written in the workflow task that completes the run, it goes into the close record the server writes
    anyway; written in an earlier task, before the acks, it costs a visibility write of its own. The acks
    are bounded (three attempts, a schedule-to-start timeout), so the outcome becomes searchable at most that
    much later; the ``status`` query has it at once.
    """
    workflow.upsert_search_attributes(
        [
            sa.DELETION_OUTCOME.value_set(final.outcome.value),
            sa.DELETION_STEP.value_set(final.failed_step or Step.DONE.value),
            sa.DELETION_BYTES.value_set(final.bytes),
        ]
    )
