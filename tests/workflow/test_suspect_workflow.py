"""LedgerSuspectWorkflow on Temporal's test environment, its two activities replaced by name."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from ledger_deletion.contracts import RetrySpec
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.watch_contracts import (
    CheckSuspectInput,
    CheckSuspectResult,
    PublishSuspectInput,
    PublishSuspectResult,
    SuspectInput,
    SuspectOutcome,
    SuspectPolicy,
    SuspectResult,
    SuspectStep,
)
from workflows.suspect import LedgerSuspectWorkflow

REQUEST = PendingDeleteLedgerInfo(
    topic_name="public/default/t",
    ledger_component=LedgerComponent.MANAGED_LEDGER,
    ledger_type=LedgerType.LEDGER,
    ledger_id=42,
    properties={"source": "watcher"},
)
POLICY = SuspectPolicy(
    delay_seconds=1.5,
    retry=RetrySpec(max_attempts=0, initial_seconds=0.1, max_interval_seconds=0.2),
    activity_timeout_seconds=5,
)


@dataclass
class Fakes:
    answer: CheckSuspectResult
    check_failures: int = 0  # the check fails this many times first (ZooKeeper away, say)
    checked_at: list[float] = field(default_factory=list)
    published: list[PendingDeleteLedgerInfo] = field(default_factory=list)

    @activity.defn(name=SuspectStep.CHECK.value)
    async def check(self, inp: CheckSuspectInput) -> CheckSuspectResult:
        self.checked_at.append(time.monotonic())
        if len(self.checked_at) <= self.check_failures:
            raise ApplicationError("ZooKeeper unreachable", type="MetadataStoreUnavailable")
        return self.answer

    @activity.defn(name=SuspectStep.PUBLISH.value)
    async def publish(self, inp: PublishSuspectInput) -> PublishSuspectResult:
        self.published.append(inp.request)
        return PublishSuspectResult(f"msg-{len(self.published)}")


async def run(client: Client, fakes: Fakes) -> tuple[SuspectResult, float]:
    queue = f"suspect-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[LedgerSuspectWorkflow], activities=[fakes.check, fakes.publish]
    ):
        began = time.monotonic()
        result = await client.execute_workflow(
            LedgerSuspectWorkflow.run,
            SuspectInput(REQUEST, POLICY),
            id=f"ledger-deletion-watch/test/{uuid.uuid4().hex}",
            task_queue=queue,
        )
    return result, began


async def test_a_suspect_still_there_after_the_delay_is_published(temporal_client: Client) -> None:
    fakes = Fakes(CheckSuspectResult(exists=True, detail="BookKeeper ledger exists"))
    result, began = await run(temporal_client, fakes)
    assert result == SuspectResult(
        SuspectOutcome.PUBLISHED, 42, "LEDGER", reason="BookKeeper ledger exists", message_id="msg-1"
    )
    assert fakes.published == [REQUEST]
    assert fakes.checked_at[0] - began >= POLICY.delay_seconds


async def test_a_suspect_gone_or_listed_again_is_not_published(temporal_client: Client) -> None:
    gone = Fakes(CheckSuspectResult(exists=False, detail="no BookKeeper ledger"))
    assert (await run(temporal_client, gone))[0].outcome is SuspectOutcome.GONE
    listed = Fakes(CheckSuspectResult(exists=True, referenced_as="ledger list of t"))
    result, _ = await run(temporal_client, listed)
    assert (result.outcome, result.reason) == (SuspectOutcome.REFERENCED, "ledger list of t")
    assert gone.published == listed.published == []


async def test_a_check_that_fails_is_retried_until_it_answers(temporal_client: Client) -> None:
    fakes = Fakes(CheckSuspectResult(exists=True), check_failures=4)
    result, _ = await run(temporal_client, fakes)
    assert result.outcome is SuspectOutcome.PUBLISHED and len(fakes.checked_at) == 5
