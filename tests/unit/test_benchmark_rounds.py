"""bench/benchmark.py --rounds: A/C is the median of the rounds' ratios; each round's checks are shown."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench.phases import AResult, CResult
from bench.report import Round, a_over_c, print_table


def _a(rate: float, **checks: Any) -> AResult:
    return AResult(
        n=1000,
        seconds=1000 / rate,
        rate=rate,
        steady_rate=rate + 1,
        events_happy=31.5,
        servers_cpu={"temporal": 36.4, "zookeeper": 3.0},
        **checks,
    )


def _c(rate: float) -> CResult:
    return CResult(
        n=1000,
        activities=4.5,
        first_round=1.9,
        seconds=1000 / rate,
        rate=rate,
        steady_rate=rate + 1,
        procs={},
        servers_cpu={"temporal": 33.9},
    )


def _report(pairs: list[tuple[AResult, CResult]]) -> dict[str, Any]:
    first_a, first_c = pairs[0]
    return {
        "n": 1000,
        "run_id": "abc123",
        "load_before": "0.1",
        "load_after": "2.0",
        "replicas": "",
        "A": asdict(first_a),
        "C": asdict(first_c),
        "rounds": [asdict(Round.of(a, c)) for a, c in pairs],
    }


def test_one_round_is_the_plain_ratio() -> None:
    report = _report([(_a(45.0), _c(50.0))])

    assert a_over_c(report) == 45.0 / 50.0
    table = print_table(report)
    assert table.splitlines()[-1].startswith("A/B=nan A/C=0.90 ")
    assert "median" not in table


def test_several_rounds_report_the_median_and_each_round() -> None:
    report = _report(
        [
            (_a(40.0), _c(50.0)),  # 0.80
            (_a(47.0), _c(50.0)),  # 0.94
            (
                _a(45.0),
                _c(50.0),
            ),  # 0.90
        ]
    )

    assert a_over_c(report) == 0.90
    table = print_table(report)
    assert table.splitlines()[-1].startswith("A/B=nan A/C=0.90 ")
    assert "A/C below is the median of 3 rounds" in table
    rows = [line.split() for line in table.splitlines() if line[:1] in "123" and len(line.split()) == 8]
    assert [row[5] for row in rows] == ["0.80", "0.94", "0.90"]
    # The server's CPU per deletion and per trivial workflow, which the ratio mostly follows.
    assert [row[6] for row in rows] == ["36.4/33.9"] * 3


def test_a_round_shows_what_went_wrong_in_it() -> None:
    lossy = _a(44.0, wrong=1, missing=2, unacked=3, storage_problems=["ledger 7 still in ZooKeeper"])
    report = _report([(_a(45.0, unacked=0), _c(50.0)), (lossy, _c(50.0))])

    rounds = print_table(report).splitlines()
    assert any(line.startswith("2 ") and line.endswith("2/2/3") for line in rounds)
    assert any(line.startswith("1 ") and line.endswith("0/0/0") for line in rounds)


def test_the_table_shows_the_sampled_state_transitions_of_a_and_c() -> None:
    a, c = _a(45.0), _c(50.0)
    a.transitions, a.transitions_happy, c.transitions = 27.3, 28.04, 24.9

    table = print_table(_report([(a, c)]))

    assert "state transitions per workflow (sampled histories): A 27.3 (DELETED 28.0), C 24.9" in table
    assert "state transitions" not in print_table(_report([(_a(45.0), _c(50.0))]))
