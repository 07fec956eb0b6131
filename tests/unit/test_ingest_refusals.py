"""Which refusals of a start the ingest loop dead-letters, and which it holds and retries; the sweeper
settles every message it can even when one ack keeps failing.

A refusal of the request itself (its size, its content) cannot change on retry: dead-lettered. A refusal
that comes from the setup (no search attributes registered, Temporal away, credentials) would dead-letter
every message until someone noticed: held, they resume by themselves once it is fixed.
"""

from types import SimpleNamespace
from typing import Any
from unittest.mock import AsyncMock

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion.adapters.messaging import Handoff, PendingAcks
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from workers.ingest import Ingestor, _refuses_the_request


@pytest.mark.parametrize(
    ("status", "message", "dead_lettered"),
    [
        (RPCStatusCode.INVALID_ARGUMENT, "Blob data size exceeds limit.", True),
        (RPCStatusCode.INVALID_ARGUMENT, "WorkflowId length exceeds limit.", True),
        # What the server says without `ledger-deletion setup` (wording of recent servers and older ones).
        (
            RPCStatusCode.INVALID_ARGUMENT,
            "Namespace default has no mapping defined for search attribute LedgerId",
            False,
        ),
        (RPCStatusCode.INVALID_ARGUMENT, "Search attribute LedgerId is not defined.", False),
        (RPCStatusCode.UNAVAILABLE, "connection refused", False),
        (RPCStatusCode.RESOURCE_EXHAUSTED, "namespace rate limit exceeded", False),
        (RPCStatusCode.PERMISSION_DENIED, "Request unauthorized.", False),
    ],
)
def test_only_a_refusal_of_the_request_itself_is_dead_lettered(
    status: RPCStatusCode, message: str, dead_lettered: bool
) -> None:
    assert _refuses_the_request(RPCError(message, status, b"")) is dead_lettered


class _Consumer:
    def __init__(self, fails: bool) -> None:
        self.fails, self.acked = fails, 0

    def acknowledge(self, message_id: object) -> None:
        if self.fails:
            raise RuntimeError("broker gone")
        self.acked += 1


class _CompletedRuns:
    """Temporal as the sweeper sees it: every run it asks about has completed."""

    def get_workflow_handle(self, workflow_id: str) -> Any:
        description = SimpleNamespace(status=WorkflowExecutionStatus.COMPLETED, run_id="run-1")
        return SimpleNamespace(describe=AsyncMock(return_value=description))


async def test_one_failing_ack_does_not_stop_the_sweep_of_the_others() -> None:
    pending = PendingAcks()
    failing, working = _Consumer(fails=True), _Consumer(fails=False)
    request = PendingDeleteLedgerInfo("t/ns/topic", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    for key, consumer in (("a-first", failing), ("b-second", working)):
        pending.hold(key, consumer, key)
        pending.bind(key, Handoff(f"wf-{key}", request, 0.0))
    ingestor = Ingestor(
        _CompletedRuns(),  # type: ignore[arg-type]
        consumer=None,
        pending=pending,
        dead_letters=None,  # type: ignore[arg-type]
        policy=None,  # type: ignore[arg-type]
        workflow_queue="wf",
        ack_queue="acks",
        system_topic="persistent://pulsar/system/__ledger_deletion",
    )
    ingestor._decided_by = AsyncMock(return_value=True)  # type: ignore[method-assign]  # each run had it as input
    assert await ingestor.sweep(held_for=0) == 1
    assert working.acked == 1 and len(pending) == 1  # the failing one is left for the next sweep
