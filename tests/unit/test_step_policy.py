"""Per-step retry and timeout settings, as the workflow receives them in its policy."""

from __future__ import annotations

import pytest

from ledger_deletion.contracts import DeletionPolicy, Step
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.policy import deletion_policy
from ledger_deletion.settings import Settings


def test_one_call_steps_time_out_after_three_of_their_clients_timeouts() -> None:
    policy = deletion_policy(Settings(admin_timeout_seconds=4, zookeeper_timeout_seconds=6))
    assert policy.timeout_seconds_for(Step.CHECK_TOPIC) == 12
    assert policy.timeout_seconds_for(Step.ASK_OWNER_BROKER) == 12
    assert policy.timeout_seconds_for(Step.VERIFY_BK_METADATA) == 18
    assert policy.timeout_seconds_for(Step.DELETE_BK_LEDGER) == 18
    # Many objects to delete, a message to publish, acks: the policy's own timeout.
    for step in (Step.DELETE_OFFLOAD_SEGMENT, Step.PUBLISH_DEAD_LETTER, Step.ACK_MESSAGES):
        assert policy.timeout_seconds_for(step) == 60


def test_derived_timeouts_never_exceed_the_activity_timeout() -> None:
    policy = deletion_policy(Settings(activity_timeout_seconds=20))
    assert policy.timeout_seconds_for(Step.VERIFY_BK_METADATA) == 20
    assert policy.step_timeout_seconds == {}  # nothing differs, nothing carried in every workflow input


def test_a_configured_step_timeout_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_STEP_TIMEOUT_SECONDS", '{"check_topic": 5, "ack_messages": 90}')
    policy = deletion_policy(load_settings())
    assert policy.timeout_seconds_for(Step.CHECK_TOPIC) == 5
    assert policy.timeout_seconds_for(Step.ACK_MESSAGES) == 90
    assert policy.timeout_seconds_for(Step.VERIFY_BK_METADATA) == 30


def test_runs_started_before_step_timeouts_keep_their_one_timeout() -> None:
    policy = DeletionPolicy(activity_timeout_seconds=45)
    assert all(policy.timeout_seconds_for(step) == 45 for step in Step)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("LEDGER_DELETION_STEP_TIMEOUT_SECONDS", '{"check_topik": 5}', "check_topik"),
        ("LEDGER_DELETION_STEP_TIMEOUT_SECONDS", '{"check_topic": 0}', "greater than 0"),
        ("LEDGER_DELETION_STEP_RETRY", '{"delete_offlaod_segment": {"max_attempts": 3}}', "delete_offlaod"),
        # Dead letters are published until they are, acks tried three times: no retry override applies.
        ("LEDGER_DELETION_STEP_RETRY", '{"ack_messages": {"max_attempts": 3}}', "ack_messages"),
    ],
)
def test_a_step_setting_that_would_be_ignored_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, named: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable) as info:
        load_settings()
    assert named in str(info.value)
