"""``judge``: does a ledger's BookKeeper metadata prove it is the ledger a request describes?"""

from __future__ import annotations

import pytest

from activities.bookkeeper import judge
from ledger_deletion.contracts import Verdict
from ledger_deletion.formats.bk_metadata import LedgerMetadata
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

ML_NAME = "public/default/persistent/orders-partition-0"
DATA_REQUEST = PendingDeleteLedgerInfo(
    "public/default/orders-partition-0", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7
)


def metadata(custom: dict[str, bytes]) -> LedgerMetadata:
    return LedgerMetadata(
        format_version=3,
        quorum_size=2,
        ensemble_size=2,
        ack_quorum_size=2,
        length=0,
        last_entry_id=-1,
        state="CLOSED",
        custom_metadata=custom,
    )


DATA_TAGS = {
    "application": b"pulsar",
    "component": b"managed-ledger",
    "pulsar/managed-ledger": ML_NAME.encode(),
}


def test_a_data_ledger_with_its_tags_matches() -> None:
    assert judge(metadata(DATA_TAGS), DATA_REQUEST) == (Verdict.MATCH, "")


@pytest.mark.parametrize("cursor", [b"sub-a", b"\xff\xfe", b""])
def test_any_cursor_tag_makes_a_data_request_a_mismatch(cursor: bytes) -> None:
    """A cursor ledger claimed as data is a mismatch, whatever its cursor tag holds: one that is not UTF-8
    (which ``custom`` reads as absent) used to pass as "no cursor tag"."""
    verdict, reason = judge(metadata({**DATA_TAGS, "pulsar/cursor": cursor}), DATA_REQUEST)
    assert verdict is Verdict.MISMATCH and "pulsar/cursor" in reason


def test_a_managed_ledger_tag_that_is_not_utf8_is_a_mismatch() -> None:
    tags = {**DATA_TAGS, "pulsar/managed-ledger": b"\xff" + ML_NAME.encode()}
    assert judge(metadata(tags), DATA_REQUEST)[0] is Verdict.MISMATCH
