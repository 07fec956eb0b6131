"""How the deletion workflow reads a failed step, and the retry policy it gives a step: pure functions over
Temporal's exceptions and the policy's ``RetrySpec``, imported by :mod:`workflows.ledger_deletion` through
the sandbox's pass-through. No I/O import."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from ledger_deletion.contracts import DeletionPolicy, RetrySpec, Step
from ledger_deletion.errors import DeletionPaused


def pause_note(err: BaseException) -> str | None:
    """The kill switch's note when a delete was refused because deletions are paused, else None."""
    cause = err.cause if isinstance(err, ActivityError) else None
    if isinstance(cause, ApplicationError) and cause.type == DeletionPaused.__name__:
        return cause.message
    return None


def retry_policy(spec: RetrySpec) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=spec.initial_seconds),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=max(spec.max_interval_seconds, spec.initial_seconds)),
        maximum_attempts=spec.max_attempts,
        # No non_retryable_error_types: the activity boundary raises permanent errors as non-retryable
        # (activities/_boundary.py), and the list would be written into every activity's history event.
    )


def root_cause(err: BaseException) -> BaseException:
    while isinstance(err, ActivityError) or (isinstance(err, TimeoutError) and err.cause is not None):
        if err.cause is None:
            break
        err = err.cause
    return err


def describe(err: BaseException) -> str:
    cause = root_cause(err)
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"[:500]
    if isinstance(cause, TimeoutError):
        kind = TimeoutType(cause.type).name if cause.type is not None else "UNKNOWN"
        return f"timeout ({kind})"
    return f"{type(cause).__name__}: {cause}"[:500]


def attempts_of(err: BaseException, policy: DeletionPolicy, step: Step) -> int:
    """Attempts of the failed step: reported by the activity in its error details, else from the policy."""
    cause = root_cause(err)
    if isinstance(cause, ApplicationError) and cause.details:
        detail = cause.details[0]
        if isinstance(detail, dict) and isinstance(detail.get("attempt"), int):
            return int(detail["attempt"])
    return policy.retry_for(step).max_attempts if isinstance(err, ActivityError) else 1
