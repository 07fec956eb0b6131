"""LedgerSuspectWorkflow: one durable wait per suspect, then a request for what is still there.

Deterministic code only; activities are called by name (no I/O import). The watcher starts one run per
suspect, its id derived from the ledger (``ledger_deletion.watch.suspects.Suspect.workflow_id``), so a
ledger suspected twice is waited for once. The delay is a durable timer: a watcher restarted, or replaced by
its standby, leaves every waiting suspect waiting, and the check runs on whichever watcher process is up.

Flow: sleep the delay (the broker's own delete of what it dropped finishes meanwhile) -> check that the
BookKeeper znode or the offloaded objects still exist and that nothing in Pulsar's metadata lists them ->
publish the request. The request then goes through every check of the deletion service; this workflow
deletes nothing. Its activities retry until they succeed: a suspect outlives an outage of what it reads.

Versioning: as ``workflows/ledger_deletion.py`` says, a change to what this workflow does breaks the runs
open when it rolls out; from the first release on it is versioned the same way.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from ledger_deletion.watch_contracts import (
        CheckSuspectInput,
        CheckSuspectResult,
        PublishSuspectInput,
        PublishSuspectResult,
        SuspectInput,
        SuspectOutcome,
        SuspectResult,
        SuspectStep,
    )

WORKFLOW_NAME = "LedgerSuspectWorkflow"


@workflow.defn(name=WORKFLOW_NAME)
class LedgerSuspectWorkflow:
    @workflow.run
    async def run(self, inp: SuspectInput) -> SuspectResult:
        request, policy = inp.request, inp.policy
        await workflow.sleep(timedelta(seconds=policy.delay_seconds), summary="the owner's own delete")
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=policy.retry.initial_seconds),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(
                seconds=max(policy.retry.max_interval_seconds, policy.retry.initial_seconds)
            ),
            maximum_attempts=policy.retry.max_attempts,
        )
        timeout = timedelta(seconds=policy.activity_timeout_seconds)
        check = await workflow.execute_activity(
            SuspectStep.CHECK.value,
            CheckSuspectInput(request),
            result_type=CheckSuspectResult,
            start_to_close_timeout=timeout,
            retry_policy=retry,
        )
        result = SuspectResult(
            SuspectOutcome.GONE, request.ledger_id, request.ledger_type.value, reason=check.detail
        )
        if not check.exists:
            return result
        if check.referenced_as:
            return SuspectResult(
                SuspectOutcome.REFERENCED,
                request.ledger_id,
                request.ledger_type.value,
                reason=check.referenced_as,
            )
        sent = await workflow.execute_activity(
            SuspectStep.PUBLISH.value,
            PublishSuspectInput(request),
            result_type=PublishSuspectResult,
            start_to_close_timeout=timeout,
            retry_policy=retry,
        )
        return SuspectResult(
            SuspectOutcome.PUBLISHED,
            request.ledger_id,
            request.ledger_type.value,
            reason=check.detail,
            message_id=sent.message_id,
        )
