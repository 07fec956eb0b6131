"""The audit record: from the workflow's note through Parquet and back, deduplicated, queried, summed."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ledger_deletion.audit.notes import evidence_json, note_for, source_of
from ledger_deletion.audit.reader import (
    AuditQuery,
    latest_by_ledger,
    parse_since,
    render_chart,
    select,
    summarize,
    unique,
)
from ledger_deletion.audit.record import AuditRecord, from_note, from_table, to_table
from ledger_deletion.contracts import (
    Decision,
    DeleteBkLedgerResult,
    DeleteBkLedgerStatus,
    MessageRef,
    Mode,
    Outcome,
    Verdict,
    VerifyBkMetadataResult,
)
from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

TOPIC = "persistent://acme/orders/t1"
NOW = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)


def _request(ledger_id: int = 42, properties: dict[str, str] | None = None) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        TOPIC, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id, properties=properties or {}
    )


def _record(
    ledger_id: int = 42,
    outcome: Outcome = Outcome.DELETED,
    *,
    size: int = 1000,
    at: datetime = NOW,
    run: str = "r1",
) -> AuditRecord:
    request = _request(ledger_id)
    verified = VerifyBkMetadataResult(Verdict.MATCH, znode_version=7, length=size, state="CLOSED")
    evidence = {
        "verify_bk_metadata": evidence_json(verified, at.isoformat()),
        "delete_bk_ledger": evidence_json(
            DeleteBkLedgerResult(DeleteBkLedgerStatus.DELETED), (at + timedelta(seconds=1)).isoformat()
        ),
    }
    decision = Decision(request.summary(), TOPIC, outcome, "", "", ["/ledgers/00/0000/L0042"], [], size)
    note = note_for(
        MessageRef("1:2:0:-1", "q", topic=TOPIC), request, decision, evidence, at.isoformat(), Mode.LIVE
    )
    return from_note(
        note, workflow_id=f"ledger-deletion/LEDGER/{ledger_id}", run_id=run, worker="w1", written_at=at
    )


def test_a_record_survives_parquet_with_its_evidence() -> None:
    record = _record()
    buffer = io.BytesIO()
    pq.write_table(to_table([record]), buffer)
    table = pq.read_table(io.BytesIO(buffer.getvalue()))  # a plain Parquet reader
    assert table.column("ledger_id").to_pylist() == [42]
    assert table.column("outcome").to_pylist() == ["DELETED"]
    (back,) = from_table(table)
    assert back == record
    assert back.namespace == "acme/orders" and back.tenant == "acme"
    assert back.record_id == "ledger-deletion/LEDGER/42/r1/1:2:0:-1"
    evidence = back.as_json()["evidence"]
    assert evidence["verify_bk_metadata"]["znode_version"] == 7
    assert evidence["verify_bk_metadata"]["state"] == "CLOSED"
    # The delete's time is when its answer came, a second after the decision's checks.
    assert back.deleted_at == NOW + timedelta(seconds=1)


def test_evidence_is_the_same_text_on_every_replay() -> None:
    answer = VerifyBkMetadataResult(Verdict.MATCH, znode_version=3)
    assert evidence_json(answer, "t") == evidence_json(
        VerifyBkMetadataResult(Verdict.MATCH, znode_version=3), "t"
    )
    assert '"znode_version": 3' in evidence_json(answer, "t")


def test_the_source_is_the_senders_tag_else_the_broker() -> None:
    assert source_of(_request(properties={"source": "reconcile"})) == "reconcile"
    assert source_of(_request()) == "broker"


def test_a_record_written_twice_is_read_once() -> None:
    first = _record()
    again = replace(first, written_at=NOW + timedelta(seconds=5), worker="w1-retry")
    other_run = _record(run="r2", outcome=Outcome.ALREADY_DELETED)
    kept = unique([again, other_run, first])
    assert len(kept) == 2
    assert next(r for r in kept if r.run_id == "r1").worker == "w1"  # the earliest written


def test_queries_filter_by_every_contracted_option() -> None:
    records = [
        _record(1),
        _record(2, Outcome.SKIPPED_IN_USE),
        replace(_record(3), source="reconcile", topic="persistent://other/ns/t", namespace="other/ns"),
        _record(4, at=NOW - timedelta(days=3)),
    ]
    assert [r.ledger_id for r in select(records, AuditQuery(ledger=2))] == [2]
    assert [r.ledger_id for r in select(records, AuditQuery(outcome="skipped_in_use"))] == [2]
    assert [r.ledger_id for r in select(records, AuditQuery(source="reconcile"))] == [3]
    assert [r.ledger_id for r in select(records, AuditQuery(namespace="acme/orders"))] == [4, 1, 2]
    assert [r.ledger_id for r in select(records, AuditQuery(topic="persistent://other/ns/t"))] == [3]
    assert [r.ledger_id for r in select(records, AuditQuery(since=NOW - timedelta(days=1)))] == [1, 2, 3]


def test_since_takes_durations_dates_and_times() -> None:
    assert parse_since("7d", NOW) == NOW - timedelta(days=7)
    assert parse_since("90m", NOW) == NOW - timedelta(minutes=90)
    assert parse_since("2026-11-01", NOW) == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_since("2026-11-01T05:00:00+01:00", NOW) == datetime(2026, 11, 1, 4, tzinfo=UTC)
    with pytest.raises(InvalidRequestError):
        parse_since("last tuesday", NOW)


def test_the_summary_counts_what_was_freed_per_namespace_and_day() -> None:
    records = [
        _record(1, size=100),
        _record(2, size=50),
        _record(3, Outcome.SKIPPED_IN_USE, size=999),  # kept: frees nothing
        _record(4, Outcome.WOULD_DELETE, size=999),  # shadow: frees nothing
        _record(5, size=7, at=NOW - timedelta(days=1)),
    ]
    rows = summarize(records)
    assert [(r.day, r.reclaimed_bytes, r.deleted, r.records) for r in rows] == [
        ("2026-11-27", 7, 1, 1),
        ("2026-11-28", 150, 2, 4),
    ]
    assert rows[1].by_outcome == {"DELETED": 2, "SKIPPED_IN_USE": 1, "WOULD_DELETE": 1}


def test_the_latest_decision_per_ledger_marks_reconcile_candidates() -> None:
    early = _record(9, Outcome.SKIPPED_IN_USE, at=NOW - timedelta(hours=1))
    late = _record(9, Outcome.DELETED, run="r2")
    assert latest_by_ledger([late, early])[("LEDGER", 9)].outcome == "DELETED"


def test_the_summary_chart_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "audit.png"
    render_chart(summarize([_record(1), _record(2, at=NOW - timedelta(days=1))]), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reconcile_marks_the_candidates_the_service_decided_before() -> None:
    from reconcile.candidates import Decided, already_decided

    decided = {
        ("LEDGER", 7): Decided("LEDGER", 7, "SKIPPED_IN_USE", "still listed by its owner", "2026-11-27"),
        ("OFFLOAD_LEDGER", 8): Decided("OFFLOAD_LEDGER", 8, "DELETED", "", "2026-11-27"),
    }
    candidates = [_request(7), _request(8), _request(9)]  # 8 is a BookKeeper ledger: its offload was decided
    assert [(d.ledger_id, d.outcome) for d in already_decided(candidates, decided)] == [(7, "SKIPPED_IN_USE")]
