"""Benchmark C replays A's shapes: the activities, the first round, each activity's timeouts, and the last
activity on the starter's own queue, as A's ack runs in the process that started the run.

The round trip is what keeps A/C a comparison of equal work: a shape read from a history
(``history_sample``) and run by ``TrivialWorkflow`` gives a history of the same shape.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.phases import Shape, _seconds, history_sample
from bench.trivial import TRIVIAL_WORKFLOW, TrivialInput, TrivialWorkflow, noop

pytestmark = pytest.mark.stack


async def test_a_shape_read_from_a_history_runs_as_the_same_shape(temporal_client: Client) -> None:
    queue = f"c-replay-{uuid.uuid4().hex[:8]}"
    shape = Shape(4, 2, ((30.0, 0.0), (30.0, 0.0), (60.0, 0.0), (45.0, 120.0)))
    finished: list[tuple[str | None, int]] = []

    @activity.defn(name="noop")
    async def finish(step: int) -> int:
        finished.append((activity.info().workflow_id, step))
        return step

    with ThreadPoolExecutor(4) as executor:
        async with (
            Worker(
                temporal_client,
                task_queue=queue,
                workflows=[TrivialWorkflow],
                workflow_runner=UnsandboxedWorkflowRunner(),
            ),
            Worker(
                temporal_client,
                task_queue=f"{queue}-activities",
                activities=[noop],
                activity_executor=executor,
            ),
            Worker(temporal_client, task_queue=f"{queue}-starter", activities=[finish]),
        ):
            result = await temporal_client.execute_workflow(
                TRIVIAL_WORKFLOW,
                TrivialInput(
                    4, f"{queue}-activities", 2, [list(pair) for pair in shape.timeouts], f"{queue}-starter"
                ),
                id=f"{queue}/0",
                task_queue=queue,
            )

    assert result == 4
    assert finished == [(f"{queue}/0", 3)]  # only the last activity, and on the starter's queue
    sample = await history_sample(temporal_client, [f"{queue}/0"])
    assert sample.shapes == [shape]
    assert sample.kinds["activity_task_scheduled_event_attributes"] == 4
    # Each of the four activities is at least scheduled, started and completed: a state transition each.
    assert sample.transitions[0] >= 12


def test_a_timeout_the_server_recorded_as_unbounded_is_none() -> None:
    assert _seconds(Duration()) == 0.0
    assert _seconds(Duration(seconds=315_360_000)) == 0.0  # ten years: what an unset timeout can become
    assert _seconds(Duration(seconds=30, nanos=500_000_000)) == 30.5
