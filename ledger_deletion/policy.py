"""Building the workflow's DeletionPolicy from settings (done once, at the edge)."""

from __future__ import annotations

from ledger_deletion.contracts import DeletionPolicy, RetrySpec
from ledger_deletion.settings import Settings


def deletion_policy(settings: Settings) -> DeletionPolicy:
    default = RetrySpec(
        max_attempts=settings.max_attempts,
        initial_seconds=settings.retry_initial_seconds,
        max_interval_seconds=settings.retry_max_interval_seconds,
    )
    per_step = {
        step: RetrySpec(
            max_attempts=override.max_attempts or default.max_attempts,
            initial_seconds=override.initial_seconds or default.initial_seconds,
            max_interval_seconds=override.max_interval_seconds or default.max_interval_seconds,
        )
        for step, override in settings.step_retry.items()
    }
    return DeletionPolicy(
        pulsar_queue=settings.task_queue("pulsar"),
        bookkeeper_queue=settings.task_queue("bookkeeper"),
        offload_queue=settings.task_queue("offload"),
        default_retry=default,
        step_retry=per_step,
        activity_timeout_seconds=settings.activity_timeout_seconds,
        in_use_rechecks=settings.in_use_rechecks,
        in_use_recheck_seconds=settings.in_use_recheck_seconds,
        ack_schedule_to_start_seconds=settings.ack_schedule_to_start_seconds,
    )
