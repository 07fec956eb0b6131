"""The bulk drain's arithmetic and its table, on numbers made up here (the drain itself needs a stack and
minutes: ``python bench/benchmark.py --bulk 200``)."""

from __future__ import annotations

from dataclasses import asdict

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import (
    ActivityTaskScheduledEventAttributes,
    ActivityTaskStartedEventAttributes,
    HistoryEvent,
)

from bench.benchmark import parse_bulk_replicas
from bench.delete_times import delete_starts, peak_rate
from bench.drain import DrainResult, Sample
from bench.report import backlog_rows, drain_lines


def test_peak_rate_is_the_busiest_window() -> None:
    # Five in the first second, then one a second: the one-second peak is the burst, the ten-second one the
    # burst spread over ten seconds.
    times = [0.0, 0.1, 0.2, 0.3, 0.4, *range(1, 20)]
    assert peak_rate(times, 1.0) == 5.0
    assert peak_rate(times, 10.0) == 1.4  # 0 … 9.x: the five, and 1 … 9
    assert peak_rate([], 1.0) == 0.0


def _scheduled(event_id: int, name: str) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    event.activity_task_scheduled_event_attributes.CopyFrom(ActivityTaskScheduledEventAttributes())
    event.activity_task_scheduled_event_attributes.activity_type.name = name
    return event


def _started(event_id: int, scheduled: int, seconds: int) -> HistoryEvent:
    return HistoryEvent(
        event_id=event_id,
        event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
        event_time=Timestamp(seconds=seconds, nanos=500_000_000),
        activity_task_started_event_attributes=ActivityTaskStartedEventAttributes(
            scheduled_event_id=scheduled
        ),
    )


def test_delete_starts_are_the_delete_activities_dispatch_times() -> None:
    events = [
        _scheduled(5, "delete_bk_ledger"),
        _scheduled(6, "ack_messages"),
        _started(7, 5, 100),
        _started(8, 6, 101),  # the ack: not a delete
        _scheduled(9, "delete_offload_segment"),
        _started(10, 9, 102),
    ]
    assert delete_starts(events) == [("bookkeeper", 100.5), ("offload", 102.5)]


def test_bulk_replicas_take_a_count_each_or_the_default() -> None:
    assert parse_bulk_replicas("1,2", 2000) == [(1, 2000), (2, 2000)]
    assert parse_bulk_replicas("1:20000,2:5000", 2000) == [(1, 20000), (2, 5000)]


def _sample(t: float, closed: int) -> Sample:
    return Sample(t, closed, 100 - closed, 100 - closed, {"workflow": 3}, {"d1-workflow-0": 170.0}, t / 10)


def test_backlog_rows_keep_the_first_and_the_last() -> None:
    samples = [asdict(_sample(t, t)) for t in range(100)]
    rows = backlog_rows(samples, points=10)
    assert len(rows) == 10 and rows[0]["t"] == 0 and rows[-1]["t"] == 99


def test_the_drain_table_shows_rates_cpu_limits_memory_and_backlogs() -> None:
    drained = DrainResult(
        replicas=1,
        n=100,
        ledgers=98,
        seconds=49.0,
        rate=2.0,
        steady_rate=2.5,
        outcomes={"DELETED": 90, "SKIPPED_IN_USE": 8},
        deletes={"bookkeeper": 80},
        peak_rate={"bookkeeper": {"1s": 9.0, "10s": 5.4, "60s": 4.9}},
        mean_delete_rate={"bookkeeper": 1.63},
        limits={"bookkeeper": 5.0, "offload": 0.0},
        server_limits={"bookkeeper": 5.0},
        rss_mb={"d1-workflow-0": {"start": 160.0, "middle": 180.0, "end": 181.0}},
        pools_cpu_s={"d1-workflow-0": 4.0},
        servers_cpu_s={"temporal": 5.8},
        samples=[_sample(0, 0), _sample(49, 98)],
    )
    report = {"load_before": "1.0", "load_after": "2.0", "settings": [], "drains": [asdict(drained)]}
    table = "\n".join(drain_lines(report))
    assert (
        "1                                 100      98       49   2.00   2.50      10        0.100" in table
    )
    assert "bookkeeper             80   1.63     9.00   5.40   4.90    5.0    5.0" in table
    assert "d1-workflow-0                    160     180     181" in table
    assert "wrong 0, missing 0, dead-lettered 0, unacked -1" in table
