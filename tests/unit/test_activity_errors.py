"""Where the project's exception tree meets Temporal's: what an activity's failure looks like to the server.

Retry policies and operators match on the error's type name; permanent errors must not be retried, and the
attempt number travels in the details so that a dead letter can report it.
"""

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities._boundary import translate_errors
from ledger_deletion.errors import AdminApiUnavailable, MetadataFormatError


@translate_errors
def failing(error: Exception) -> str:
    raise error


def test_a_transient_error_is_retryable_and_keeps_its_class() -> None:
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(failing, AdminApiUnavailable("broker down"))
    assert raised.value.type == "AdminApiUnavailable" and not raised.value.non_retryable
    assert raised.value.details == ({"attempt": 1},)
    assert isinstance(raised.value.__cause__, AdminApiUnavailable)


def test_a_permanent_error_is_not_retried() -> None:
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(failing, MetadataFormatError("not BookKeeper metadata"))
    assert raised.value.type == "MetadataFormatError" and raised.value.non_retryable


def test_other_errors_pass_through_for_temporal_to_retry() -> None:
    with pytest.raises(KeyError):
        ActivityEnvironment().run(failing, KeyError("a bug"))
