"""bench/histories.py counts a history's events, tasks, markers, timers and signals, and estimates its
Temporal Cloud actions as Temporal bills them: markers per workflow task, retries, no charge for a version
upsert."""

from __future__ import annotations

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.histories import Counts, count_history


def _task() -> list[HistoryEvent]:
    return [
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
    ]


def _activity(attempt: int = 1) -> list[HistoryEvent]:
    started = HistoryEvent(event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    started.activity_task_started_event_attributes.attempt = attempt
    return [
        HistoryEvent(event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        started,
        HistoryEvent(event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED),
    ]


def _marker(task: int) -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.EVENT_TYPE_MARKER_RECORDED)
    event.marker_recorded_event_attributes.workflow_task_completed_event_id = task
    return event


def _upsert(*names: str) -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
    fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    for name in names:
        fields[name].CopyFrom(Payload(data=b'"x"'))
    return event


def test_a_run_with_every_kind_of_event() -> None:
    last_task = _task()
    # Two local-activity attempts after the first of their activities: each billed (Cloud Actions, Activity).
    metering = last_task[2].workflow_task_completed_event_attributes.metering_metadata
    metering.nonfirst_local_activity_execution_attempts = 2
    history = [
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        *_task(),
        _marker(4),  # two local activities in the first workflow task: one action
        _marker(4),
        *_activity(),
        *_activity(attempt=3),  # two retries
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT),  # a worker too busy to answer
        *_task(),
        HistoryEvent(event_type=EventType.EVENT_TYPE_TIMER_STARTED),
        HistoryEvent(event_type=EventType.EVENT_TYPE_TIMER_FIRED),
        *last_task,
        _marker(17),
        _upsert("DeletionStep", "DeletionOutcome"),
        _upsert("TemporalChangeVersion"),  # the SDK's versioning attribute: not billed
        HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED),
    ]

    counts = count_history(history, transitions=20, history_bytes=7000)

    assert counts == Counts(
        runs=1,
        events=len(history),
        workflow_tasks=4,
        workflow_task_timeouts=1,
        activity_tasks=2,
        activity_retries=2,
        markers=3,
        timers=1,
        signals=1,
        upserts=2,
        # start 1 + activities 2 + retries 2 + markers of two tasks 2 + local retries 2 + timer 1 + signal 1
        # + one billed upsert 1
        actions=12,
        transitions=20,
        history_bytes=7000,
    )


def test_counts_add_up_and_divide() -> None:
    one = Counts(runs=1, events=33, workflow_tasks=5, activity_tasks=5, actions=7)
    two = one + Counts(runs=1, events=27, workflow_tasks=4, activity_tasks=4, actions=6)

    assert two == Counts(runs=2, events=60, workflow_tasks=9, activity_tasks=9, actions=13)
    assert two.per(2)["events"] == 30.0
    assert Counts().per(0)["events"] == 0.0
