"""bench/step_timings.py adds up a history's waits and holds from the events' server times."""

from __future__ import annotations

from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.history.v1 import HistoryEvent

from bench.step_timings import step_times, summarize


def _event(event_id: int, ms: int, kind: str, **attrs: Any) -> HistoryEvent:
    event = HistoryEvent(
        event_id=event_id, event_time=Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)
    )
    getattr(event, kind).SetInParent()
    for name, value in attrs.items():
        target = getattr(event, kind)
        if name == "activity_type":
            target.activity_type.name = value
        elif name == "task_queue":
            target.task_queue.name = value
        else:
            setattr(target, name, value)
    return event


def _history() -> list[HistoryEvent]:
    return [
        _event(1, 1_000, "workflow_execution_started_event_attributes"),
        _event(2, 1_000, "workflow_task_scheduled_event_attributes"),
        _event(3, 1_100, "workflow_task_started_event_attributes", scheduled_event_id=2),
        _event(4, 1_130, "workflow_task_completed_event_attributes", started_event_id=3),
        _event(
            5,
            1_130,
            "activity_task_scheduled_event_attributes",
            activity_type="ack_messages",
            task_queue="q-ack",
        ),
        _event(6, 1_800, "activity_task_started_event_attributes", scheduled_event_id=5),
        _event(7, 1_850, "activity_task_completed_event_attributes", started_event_id=6),
        _event(8, 1_850, "workflow_task_scheduled_event_attributes"),
        _event(9, 1_900, "workflow_task_started_event_attributes", scheduled_event_id=8),
        _event(10, 1_960, "workflow_task_completed_event_attributes", started_event_id=9),
        _event(11, 1_960, "workflow_execution_completed_event_attributes"),
    ]


def test_phases_of_one_history() -> None:
    times = step_times(_history())
    assert times.workflow_task_wait == 150  # 100 + 50
    assert times.workflow_task_held == 90  # 30 + 60
    assert times.activity_wait == 670
    assert times.activity_running == 50
    assert times.whole == 960
    assert (times.workflow_tasks, times.activities) == (2, 1)
    assert times.waits_by_activity == {"ack_messages on q-ack": [670]}


def test_summary_names_each_activity_and_queue() -> None:
    lines = summarize([step_times(_history()), step_times(_history())])
    assert lines[0] == "2 workflows, ms per workflow (mean)"
    assert any(line.split()[:2] == ["activity_wait", "670.0"] for line in lines)
    assert any("ack_messages on q-ack" in line and "n=2" in line for line in lines)
    assert summarize([]) == ["no closed workflows"]
