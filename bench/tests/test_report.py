"""bench/report.py: the table at the end of a run shows every phase, what went wrong in it, and A/B."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench.phases import AResult, BResult
from bench.report import print_table


def _a(rate: float, **checks: Any) -> AResult:
    return AResult(
        n=1000,
        seconds=1000 / rate,
        rate=rate,
        steady_rate=rate + 1,
        events_happy=31.5,
        servers_cpu={"temporal": 36.4, "zookeeper": 3.0},
        procs={"a-workflow-0": {"cpu_s": 12.1, "rss_mb": 166}},
        **checks,
    )


def _b(rate: float) -> BResult:
    return BResult(
        n=1000,
        seconds=1000 / rate,
        rate=rate,
        steady_rate=rate,
        p50_ms=1.0,
        p95_ms=2.0,
        p99_ms=3.0,
        outcomes={"DELETED": 1000},
        reconsumed=0,
        faults_injected=0,
        cpu_s=7.5,
        rss_mb=126,
        storage_problems=[],
    )


def _report(a: AResult, b: BResult | None = None) -> dict[str, Any]:
    report = {
        "n": 1000,
        "run_id": "abc123",
        "load_before": "0.1",
        "load_after": "2.0",
        "replicas": "",
        "A": asdict(a),
    }
    return {**report, "B": asdict(b)} if b else report


def test_the_last_line_is_a_over_b_events_and_p99() -> None:
    table = print_table(_report(_a(25.0, p99_ms=550.0), _b(100.0)))

    assert table.splitlines()[-1] == "A/B=0.25 events_per_deletion=31.5 p99_ms=550"
    assert "  B pip186 consumer             7.5        126" in table


def test_without_b_the_ratio_is_not_a_number() -> None:
    assert print_table(_report(_a(25.0))).splitlines()[-1].startswith("A/B=nan ")


def test_what_went_wrong_is_shown() -> None:
    lossy = _a(44.0, wrong=1, missing=2, unacked=3, storage_problems=["ledger 7 still exists"])

    table = print_table(_report(lossy))

    assert "wrong 1, missing 2, unacked 3, storage problems 1" in table


def test_the_table_shows_the_sampled_state_transitions() -> None:
    a = _a(45.0)
    a.transitions, a.transitions_happy = 27.3, 28.04

    expected = "state transitions per workflow (sampled histories): 27.3 (DELETED 28.0)"
    assert expected in print_table(_report(a))
    assert "state transitions" not in print_table(_report(_a(45.0)))
