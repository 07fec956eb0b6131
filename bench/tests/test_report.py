"""bench/report.py: counts per shape first (A's from the histories, B's deliveries), then CPU per message of
every process as a share of B's whole, throughput last, and whether every request ended as it must."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench.histories import Counts
from bench.mix import BK, DUPLICATE, IN_USE
from bench.phases import AResult, BResult, ShapeRow
from bench.report import print_table


def _counts(ledgers: int, events: int, workflow_tasks: int, activities: int, **more: int) -> dict[str, int]:
    return asdict(
        Counts(
            runs=ledgers,
            events=events * ledgers,
            workflow_tasks=workflow_tasks * ledgers,
            activity_tasks=activities * ledgers,
            **{key: value * ledgers for key, value in more.items()},
        )
    )


def _a() -> AResult:
    shapes = {
        BK: ShapeRow(
            ledgers=8, messages=8, counts=_counts(8, 33, 5, 5, actions=7, history_bytes=7168), typical=[33, 5]
        ),
        DUPLICATE: ShapeRow(ledgers=1, messages=2, counts=_counts(1, 36, 6, 5, signals=1, actions=8)),
        IN_USE: ShapeRow(ledgers=1, messages=1, counts=_counts(1, 63, 11, 7, timers=3, actions=13)),
    }
    totals = Counts()
    for row in shapes.values():
        totals += Counts(**row.counts)
    return AResult(
        n=11,
        seconds=2.0,
        rate=5.5,
        outcomes={"DELETED": 9, "SKIPPED_IN_USE": 1},
        unacked=0,
        procs={"a-workflow-0": {"cpu_s": 0.11, "rss_mb": 160}, "a-pulsar-0": {"cpu_s": 0.055, "rss_mb": 150}},
        servers_cpu={"temporal": 0.44, "zookeeper": 0.022},
        counted=True,
        shapes=shapes,
        totals=asdict(totals),
    )


def _b() -> BResult:
    return BResult(
        n=11,
        seconds=0.5,
        rate=22.0,
        steady_rate=22.0,
        p50_ms=1.0,
        p95_ms=2.0,
        p99_ms=3.0,
        outcomes={"DELETED": 9, "ALREADY_DELETED": 1, "SKIPPED_IN_USE": 1},
        reconsumed=0,
        faults_injected=0,
        cpu_s=0.088,
        rss_mb=126,
        storage_problems=[],
        deliveries=15,
        servers_cpu={"zookeeper": 0.022},
        shapes={
            BK: ShapeRow(ledgers=8, messages=8, deliveries=8),
            DUPLICATE: ShapeRow(ledgers=1, messages=2, deliveries=2),
            IN_USE: ShapeRow(ledgers=1, messages=1, deliveries=4),
        },
    )


def _report(a: AResult, b: BResult | None = None) -> dict[str, Any]:
    report = {"n": 11, "run_id": "abc123", "load_before": "0.1", "load_after": "2.0", "replicas": ""}
    return {**report, "A": asdict(a), **({"B": asdict(b)} if b else {})}


def _row(table: str, label: str) -> list[str]:
    (line,) = [line for line in table.splitlines() if line.startswith(label)]
    return line[len(label) :].split()


def test_each_shape_shows_its_counts_per_ledger_and_b_s_deliveries() -> None:
    table = print_table(_report(_a(), _b()))

    header = table.splitlines()[2].split()
    for column in ("events", "tasks", "markers", "timers", "signals", "actions", "transit", "KB", "typical"):
        assert column in header
    bk_row = "8 8 33.0 5.00 5.00 0.00 0.00 0.00 7.00 0.0 7.0 33/5 1.00"  # typical: 33 events, 5 tasks
    assert _row(table, BK) == bk_row.split()
    assert _row(table, DUPLICATE)[:3] == ["1", "2", "36.0"]
    assert _row(table, DUPLICATE)[-2] == "-"  # no typical run given
    assert _row(table, DUPLICATE)[7] == "1.00"  # the second message joined the run: one signal
    assert _row(table, IN_USE)[6] == "3.00"  # three re-checks on a timer
    assert _row(table, IN_USE)[-1] == "4.00"  # B: the first delivery and three reconsumes


def test_all_per_message_divides_the_totals_by_the_messages() -> None:
    table = print_table(_report(_a(), _b()))

    events = (8 * 33 + 36 + 63) / 11
    assert _row(table, "all, per message")[:3] == ["10", "11", f"{events:.1f}"]
    assert _row(table, "all, per message")[-1] == f"{15 / 11:.2f}"
    assert table.splitlines()[-1].startswith(f"events_per_message={events:.2f} workflow_tasks_per_message=")


def test_cpu_per_message_of_each_process_is_also_a_share_of_b_s_whole() -> None:
    table = print_table(_report(_a(), _b()))

    # B: 8 ms per message in its consumer and 2 in ZooKeeper.
    assert _row(table, "  workflow pool") == ["10.00", "-", "1.00"]
    assert _row(table, "  Temporal server") == ["40.00", "-", "4.00"]
    assert _row(table, "  ZooKeeper") == ["2.00", "2.00", "0.20"]
    assert _row(table, "  B: PIP-186 consumer") == ["-", "8.00", "-"]
    assert _row(table, "  total") == ["57.00", "10.00", "5.70"]
    assert table.splitlines()[-1].endswith("cpu_ms_per_message_A=57.0 cpu_ms_per_message_B=10.0 A/B=5.70")


def test_without_b_the_ratios_are_not_numbers() -> None:
    table = print_table(_report(_a()))

    assert _row(table, "  total") == ["57.00", "-", "-"]
    assert table.splitlines()[-1].endswith("A/B=nan")


def test_what_went_wrong_is_shown() -> None:
    lossy = _a()
    lossy.wrong, lossy.missing, lossy.unacked, lossy.storage_problems = 1, 2, 3, ["ledger 7 still exists"]

    table = print_table(_report(lossy))

    assert "wrong 1, missing 2, unacked 3, storage problems 1" in table


def test_without_the_histories_there_is_no_count_table() -> None:
    a = _a()
    a.counted = False

    table = print_table(_report(a))

    assert "shape (per ledger)" not in table and "events_per_message" not in table
    assert "CPU ms per message" in table
