"""Building the workflow's DeletionPolicy from settings (done once, at the edge)."""

from __future__ import annotations

from ledger_deletion.contracts import DeletionPolicy, RetrySpec, Step
from ledger_deletion.settings import Settings

# A step that makes one call to the admin API or to ZooKeeper ends within a few of that client's timeouts
# (a redirect to the owner broker; a reconnect, then a get and a compare-and-delete), so it need not wait
# out the timeout an offload delete of many objects needs: an attempt whose task or answer the server lost
# is retried after this long instead.
CLIENT_TIMEOUTS_PER_STEP = 3


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
        min_ledger_age_seconds=settings.min_ledger_age_seconds,
        ack_schedule_to_start_seconds=settings.ack_schedule_to_start_seconds,
        step_timeout_seconds=step_timeouts(settings),
        bk_ledgers_root=settings.bk_ledgers_root,
        pause_recheck_seconds=settings.pause_recheck_seconds,
    )


def step_timeouts(settings: Settings) -> dict[str, float]:
    """Each step's start-to-close timeout where it differs from ``activity_timeout_seconds``."""
    client_timeouts = {
        Step.CHECK_TOPIC: settings.admin_timeout_seconds,
        Step.ASK_OWNER_BROKER: settings.admin_timeout_seconds,
        Step.VERIFY_BK_METADATA: settings.zookeeper_timeout_seconds,
        Step.CHECK_OFFLOAD_SUPERSEDED: settings.zookeeper_timeout_seconds,
        Step.CHECK_OFFLOAD_LISTED: settings.zookeeper_timeout_seconds,
        Step.DELETE_BK_LEDGER: settings.zookeeper_timeout_seconds,
    }
    derived = {
        step.value: min(settings.activity_timeout_seconds, CLIENT_TIMEOUTS_PER_STEP * client_timeout)
        for step, client_timeout in client_timeouts.items()
    }
    merged = derived | settings.step_timeout_seconds
    return {step: seconds for step, seconds in merged.items() if seconds != settings.activity_timeout_seconds}


def describe_policy(policy: DeletionPolicy) -> str:
    """Timeouts and retries in one line, e.g. ``start-to-close check_topic 30 s, … 60 s for the rest; …``."""
    own = "".join(f"{step} {seconds:g} s, " for step, seconds in policy.step_timeout_seconds.items())
    others = "the rest" if own else "every step"
    retry = policy.default_retry
    return (
        f"start-to-close {own}{policy.activity_timeout_seconds:g} s for {others}; "
        f"up to {retry.max_attempts} attempts, "
        f"backoff from {retry.initial_seconds:g} s to {retry.max_interval_seconds:g} s"
    )
