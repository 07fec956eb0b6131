"""Where the project's exception tree meets Temporal's: one decorator, used by every activity."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ledger_deletion.errors import DeletionPaused, LedgerDeletionError, PermanentError

P = ParamSpec("P")
R = TypeVar("R")


def translate_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a ``LedgerDeletionError`` into an ``ApplicationError`` Temporal understands.

    The error type is the class name (what operators see and what retry policies match), permanent errors
    are non-retryable, and so is a pause (the workflow waits for resume instead of Temporal retrying), and
    the attempt number travels in the details so a dead letter can report it.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LedgerDeletionError as exc:
            raise ApplicationError(
                str(exc),
                {"attempt": activity.info().attempt},
                type=type(exc).__name__,
                non_retryable=isinstance(exc, (PermanentError, DeletionPaused)),
            ) from exc

    return wrapper
