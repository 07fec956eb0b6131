"""Pieces of the reconcile job that need neither Spark nor the stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.offload_keys import offload_uuid
from ledger_deletion.request import LedgerComponent, LedgerType, request_to_wire
from reconcile.candidates import build_requests, request_for_finding
from reconcile.generator import ClusterSpec, plan_cluster, plan_young_orphans
from reconcile.job import parse_duration
from reconcile.report import ReportRow, human_bytes, render_chart, render_table, totals

UUID = "3f2a8c1e-9b7d-4e21-a5c3-0d9e8f7a6b5c"


@pytest.mark.parametrize(
    ("text", "seconds"), [("24h", 86400), ("90s", 90), ("15m", 900), ("7d", 604800), ("0", 0), ("1.5h", 5400)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "tomorrow", "3w"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def finding(**over: object) -> dict[str, object]:
    row: dict[str, object] = {
        "storage": "bookkeeper",
        "ledger_id": 42,
        "component": "data",
        "ledger_component": "MANAGED_LEDGER",
        "ledger_type": "LEDGER",
        "topic_name": "public/default/orders-partition-1",
        "cursor_name": None,
        "schema_id": None,
        "bucket": None,
        "uuid": None,
        "bytes": 10,
    }
    row.update(over)
    return row


def test_ledger_requests() -> None:
    data = request_for_finding(finding())
    assert (data.ledger_type, data.ledger_component, data.context, data.check_ledger_still_in_use) == (
        LedgerType.LEDGER,
        LedgerComponent.MANAGED_LEDGER,
        None,
        True,
    )
    assert data.managed_ledger_name == "public/default/persistent/orders-partition-1"
    cursor = request_for_finding(
        finding(component="cursor", ledger_component="MANAGED_CURSOR", cursor_name="sub")
    )
    assert cursor.cursor_name == "sub"
    schema = request_for_finding(
        finding(
            ledger_component="SCHEMA_STORAGE",
            topic_name="public/default/orders",
            schema_id="public/default/orders",
        )
    )
    assert schema.schema_id == "public/default/orders" and schema.cursor_name is None


def test_offload_request_rebuilds_the_context_from_the_key() -> None:
    request = request_for_finding(
        finding(
            storage="offload", ledger_type="OFFLOAD_LEDGER", ledger_id=12, uuid=UUID, bucket="b", bytes=99
        )
    )
    assert request.context is not None and request.context.offload_context is not None
    ctx = request.context.offload_context
    assert offload_uuid(ctx.uid_msb, ctx.uid_lsb) == UUID
    assert (ctx.uid_msb, ctx.uid_lsb) == (4551604436496895521, -6502338462329705636)  # reference §7 example
    assert ctx.driver_metadata is not None
    assert (ctx.driver_metadata.name, ctx.driver_metadata.properties) == ("aws-s3", {"bucket": "b"})
    wire = request_to_wire(request)
    assert wire["ledgerType"] == "OFFLOAD_LEDGER" and wire["context"]["ledgerId"] == 12


def test_invalid_findings_are_rejected_not_written() -> None:
    with pytest.raises(InvalidRequestError):
        request_for_finding(finding(topic_name="not a/valid/topic name!"))
    requests, rejected = build_requests(
        [finding(ledger_id=2), finding(ledger_id=1), finding(topic_name="../x")]
    )
    assert [r.ledger_id for r in requests] == [1, 2]
    assert len(rejected) == 1 and "topicName" in rejected[0].reason


def test_report_table_and_chart(tmp_path: Path) -> None:
    rows = [
        ReportRow("public", "public/default", "data", "bookkeeper", "candidate", 3, 3 * 2**20),
        ReportRow("public", "public/default", "cursor", "bookkeeper", "candidate", 1, 2048),
        ReportRow("acme", "acme/ns", "compacted", "bookkeeper", "report-only", 1, 10),
        ReportRow("acme", "acme/ns", "data", "bookkeeper", "excluded", 5, 0),
    ]
    assert totals(rows) == {"candidate": (4, 3 * 2**20 + 2048), "report-only": (1, 10), "excluded": (5, 0)}
    table = render_table(rows)
    assert table.row_count == 4
    render_chart(rows, tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert human_bytes(3 * 2**20) == "3.0 MiB" and human_bytes(10) == "10 B"


def test_generator_truth_is_consistent() -> None:
    spec = ClusterSpec(ledgers=500, seed=3)
    plan = plan_cluster(spec)
    truth = plan.truth
    ledger_ids = {i for i, _ in plan.ledgers}
    assert len(ledger_ids) == len(plan.ledgers)  # no id twice
    assert not set(truth.bk_candidates) & truth.referenced
    assert set(truth.bk_candidates) <= ledger_ids
    assert not {i for _, i in truth.offload_candidates} & truth.referenced
    assert set(truth.bk_candidates.values()) == {"MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE"}
    assert len(plan.ledgers) == pytest.approx(500, rel=0.1)
    young = plan_young_orphans(spec, plan)
    assert not {i for i, _ in young.ledgers} & ledger_ids
    assert set(young.truth.excluded_ledgers.values()) >= {"too-young", "open-recently-modified"}
    assert plan_cluster(spec).ledgers == plan.ledgers  # deterministic
