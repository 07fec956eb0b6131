"""What each change of Pulsar's metadata leaves as suspects, through :meth:`Snapshot.apply` and
:meth:`Snapshot.resync`."""

from __future__ import annotations

from ledger_deletion.formats.offload_keys import offload_uuid
from ledger_deletion.request import LedgerComponent, LedgerType
from ledger_deletion.watch.snapshot import Snapshot
from ledger_deletion.watch.suspects import REASON_PROPERTY, SOURCE_PROPERTY, Reason, Suspect

from .records import ML, ML_PATH, TOPIC, UUID_A, UUID_B, UUID_C, cursor, locator, managed_ledger


def summary(suspects: list[Suspect]) -> set[tuple[str, int, str]]:
    return {(s.request.ledger_type.value, s.request.ledger_id, s.reason.value) for s in suspects}


def loaded(path: str, data: bytes) -> Snapshot:
    snapshot = Snapshot()
    snapshot.load(path, data)
    return snapshot


def test_a_trim_leaves_the_dropped_ledgers_and_their_offloads() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1, 2, 3, 4], offloads={1: UUID_A}))
    suspects = snapshot.apply(ML_PATH, managed_ledger([3, 4, 5]))
    assert summary(suspects) == {
        ("LEDGER", 1, "trimmed"),
        ("OFFLOAD_LEDGER", 1, "trimmed"),
        ("LEDGER", 2, "trimmed"),
    }
    offload = next(s for s in suspects if s.request.ledger_type is LedgerType.OFFLOAD_LEDGER)
    assert offload.request.topic_name == TOPIC
    ctx = offload.request.context.offload_context if offload.request.context else None
    assert ctx is not None and offload_uuid(ctx.uid_msb, ctx.uid_lsb) == UUID_A
    assert offload.request.check_ledger_still_in_use
    assert offload.request.properties == {SOURCE_PROPERTY: "watcher", REASON_PROPERTY: "trimmed"}
    assert offload.workflow_id == f"ledger-deletion-watch/OFFLOAD_LEDGER/1/{UUID_A}"


def test_a_rollover_or_an_unchanged_write_leaves_nothing() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1, 2]))
    assert snapshot.apply(ML_PATH, managed_ledger([1, 2, 3])) == []
    assert snapshot.apply(ML_PATH, managed_ledger([1, 2, 3], compression="ZSTD")) == []


def test_a_replaced_offload_attempt_leaves_its_objects_only() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}, complete=False))
    [replaced] = snapshot.apply(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_B}))
    assert (replaced.request.ledger_type, replaced.request.ledger_id) == (LedgerType.OFFLOAD_LEDGER, 1)
    assert replaced.reason is Reason.OFFLOAD_REPLACED
    ctx = replaced.request.context.offload_context if replaced.request.context else None
    assert ctx is not None and offload_uuid(ctx.uid_msb, ctx.uid_lsb) == UUID_A and not ctx.complete


def test_a_segment_that_left_is_named_alone() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1], segments={1: [UUID_A, UUID_B]}))
    [left] = snapshot.apply(ML_PATH, managed_ledger([1], segments={1: [UUID_B, UUID_C]}))
    ctx = left.request.context.offload_context if left.request.context else None
    assert ctx is not None and not ctx.has_uid
    assert [offload_uuid(s.uid_msb, s.uid_lsb) for s in ctx.offload_segment] == [UUID_A]


def test_a_bookkeeper_copy_given_up_is_a_suspect_while_its_ledger_stays_listed() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}))
    [copy] = snapshot.apply(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}, released=[1]))
    assert summary([copy]) == {("LEDGER", 1, "bk-copy-released")}


def test_a_deleted_topic_leaves_every_ledger_and_each_cursor_its_own() -> None:
    snapshot = Snapshot()
    snapshot.load(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}))
    snapshot.load(f"{ML_PATH}/sub", cursor(7))
    snapshot.load(f"{ML_PATH}/inline", cursor(None))
    [cur] = snapshot.apply(f"{ML_PATH}/sub", None)
    assert summary([cur]) == {("LEDGER", 7, "cursor-deleted")}
    assert cur.request.ledger_component is LedgerComponent.MANAGED_CURSOR and cur.request.cursor_name == "sub"
    assert snapshot.apply(f"{ML_PATH}/inline", None) == []
    assert summary(snapshot.apply(ML_PATH, None)) == {
        ("LEDGER", 1, "topic-deleted"),
        ("OFFLOAD_LEDGER", 1, "topic-deleted"),
        ("LEDGER", 2, "topic-deleted"),
    }
    assert snapshot.records == 0


def test_a_cursor_switch_or_close_leaves_the_previous_ledger() -> None:
    snapshot = loaded(f"{ML_PATH}/sub", b"")  # created before its first update: no ledger yet
    assert snapshot.apply(f"{ML_PATH}/sub", cursor(7)) == []
    assert summary(snapshot.apply(f"{ML_PATH}/sub", cursor(9))) == {("LEDGER", 7, "cursor-switched")}
    assert summary(snapshot.apply(f"{ML_PATH}/sub", cursor(None))) == {("LEDGER", 9, "cursor-switched")}
    assert snapshot.apply(f"{ML_PATH}/sub", cursor(None)) == []


def test_a_schema_leaves_what_its_locator_dropped() -> None:
    path = "/schemas/public/default/orders"
    snapshot = loaded(path, locator([20, 21]))
    assert snapshot.apply(path, locator([20, 21, 22])) == []
    [dropped] = snapshot.apply(path, locator([21, 22]))
    assert summary([dropped]) == {("LEDGER", 20, "schema-ledger-dropped")}
    assert dropped.request.schema_id == "public/default/orders"
    assert dropped.request.ledger_component is LedgerComponent.SCHEMA_STORAGE
    assert summary(snapshot.apply(path, None)) == {
        ("LEDGER", 21, "schema-deleted"),
        ("LEDGER", 22, "schema-deleted"),
    }


def test_an_unreadable_write_keeps_the_last_readable_content() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1, 2, 3]))
    assert snapshot.apply(ML_PATH, b"\xff\xffcorrupt") == []
    assert ML_PATH in snapshot.unreadable
    assert summary(snapshot.apply(ML_PATH, managed_ledger([3]))) == {
        ("LEDGER", 1, "trimmed"),
        ("LEDGER", 2, "trimmed"),
    }
    assert ML_PATH not in snapshot.unreadable


def test_a_name_the_service_refuses_is_reported_not_suspected() -> None:
    path = "/managed-ledgers/public/default/persistent/bad name"
    snapshot = loaded(path, managed_ledger([1]))
    assert snapshot.apply(path, None) == []
    assert len(snapshot.rejected) == 1 and "bad name" in snapshot.rejected[0]


def test_a_resync_diffs_every_record_against_a_fresh_read() -> None:
    old = Snapshot()
    old.load(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}))
    old.load(f"{ML_PATH}/sub", cursor(7))
    old.load("/schemas/public/default/orders", locator([20]))
    other = "/managed-ledgers/public/default/persistent/gone"
    old.load(other, managed_ledger([30]))
    unreadable = "/managed-ledgers/public/default/persistent/garbled"
    old.load(unreadable, managed_ledger([40]))
    fresh = Snapshot()
    fresh.load(ML_PATH, managed_ledger([2, 3]))
    fresh.load(f"{ML_PATH}/sub", cursor(8))
    fresh.load("/schemas/public/default/orders", locator([20, 21]))
    fresh.load(unreadable, b"\x00garbage")
    suspects = old.resync(fresh)
    assert summary(suspects) == {
        ("LEDGER", 1, "trimmed"),
        ("OFFLOAD_LEDGER", 1, "trimmed"),
        ("LEDGER", 7, "cursor-switched"),
        ("LEDGER", 30, "topic-deleted"),
    }
    # The garbled record keeps what was known of it: ledger 40 is still referenced, not a suspect.
    assert old.bk_referenced() == {2, 3, 8, 20, 21, 40}
    assert ML in old.managed_ledgers


def test_bookkeeper_references_leave_out_released_copies() -> None:
    snapshot = loaded(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}, released=[1]))
    assert snapshot.bk_referenced() == {2}
    assert snapshot.newest_listed(ML) == 2
    assert snapshot.newest_listed("public/default/persistent/none") is None
