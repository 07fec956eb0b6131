"""Which refusals of a start the ingest loop dead-letters, and which it holds and retries.

A refusal of the request itself (its size, its content) cannot change on retry: dead-lettered. A refusal
that comes from the setup (no search attributes registered, Temporal away, credentials) would dead-letter
every message until someone noticed: held, they resume by themselves once it is fixed.
"""

import pytest
from temporalio.service import RPCError, RPCStatusCode

from workers.ingest import _refuses_the_request


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
