"""``ledger_deletion.explain``: the summary and details a deletion's run shows in the Temporal UI."""

from __future__ import annotations

from ledger_deletion import explain
from ledger_deletion.contracts import MessageRef, Mode
from ledger_deletion.formats.offload_keys import BUCKET_PROPERTY
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
)

MESSAGE = MessageRef("42:7:-1", "ack-queue", topic="persistent://pulsar/system/deletions")


def test_the_summary_is_one_line_and_a_shadow_run_says_so_first() -> None:
    request = PendingDeleteLedgerInfo(
        "acme/orders/events", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 123
    )
    assert (
        explain.summary(request, Mode.LIVE) == "Delete data ledger 123 of acme/orders/events from BookKeeper"
    )
    assert explain.summary(request, Mode.SHADOW) == "[shadow] " + explain.summary(request, Mode.LIVE)
    long = PendingDeleteLedgerInfo("a/b/" + "t" * 300, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    assert len(explain.summary(long, Mode.SHADOW)) == 200  # Temporal's limit for a summary


def test_the_details_name_the_ledger_where_it_is_the_message_and_the_sender() -> None:
    offload = OffloadContext(
        uid_msb=1,
        uid_lsb=2,
        complete=True,
        driver_metadata=OffloadDriverMetadata("aws-s3", {BUCKET_PROPERTY: "offload-bucket"}),
    )
    request = PendingDeleteLedgerInfo(
        "acme/orders/events",
        LedgerComponent.MANAGED_CURSOR,
        LedgerType.OFFLOAD_LEDGER,
        123,
        cursor_name="billing",
        context=LedgerInfo(123, offload_context=offload),
        properties={"source": "reconcile", "note": "x" * 500},
    )
    details = explain.details(request, Mode.LIVE, MESSAGE)
    assert "**Ledger** 123, the ledger of cursor `billing` of `acme/orders/events`" in details
    assert "offload 00000000-0000-0001-0000-000000000002, driver aws-s3, bucket offload-bucket" in details
    assert "`persistent://pulsar/system/deletions`" in details
    assert "**Message** `42:7:-1`" in details
    assert "`source=reconcile`" in details
    assert "x" * 81 not in details  # a sender's long property is cut short
    assert "`delete_offload_segment`" in details
    shadow = explain.details(request, Mode.SHADOW, MESSAGE)
    assert shadow.startswith("**Shadow**") and "`inspect_offload_segment`" in shadow
    assert "delete_offload_segment" not in shadow


def test_a_request_without_properties_lists_none() -> None:
    request = PendingDeleteLedgerInfo(
        "acme/orders/events", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 9
    )
    details = explain.details(request, Mode.LIVE, MessageRef("1:2:-1", "q"))
    assert "properties" not in details and "**Received from**" not in details
    assert "compare-and-delete" in details
