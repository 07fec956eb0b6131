"""Every pool's worker keeps the configured number of task polls open; the ack worker, the pool's slots.

The SDK's default of 5 leaves the Temporal server idle while polls travel to a busy worker and back; the
pools take theirs from the settings instead.
"""

from __future__ import annotations

import pydantic
import pytest
from temporalio.client import Client
from temporalio.worker import PollerBehaviorSimpleMaximum

from ledger_deletion.settings import Settings
from tests.support import running_pools

pytestmark = pytest.mark.stack


async def test_pools_poll_with_the_configured_pollers(settings: Settings, temporal_client: Client) -> None:
    custom = settings.model_copy(
        update={
            "workflow_task_pollers": 7,
            "activity_task_pollers": 3,
            "task_queue_prefix": f"{settings.task_queue_prefix}-pollers",
        }
    )
    # Not the pulsar pool: it would consume the session's deletion topic.
    async with running_pools(custom, temporal_client, pools=("workflow", "bookkeeper", "offload")) as running:
        assert len(running.workers) == 3
        for worker in running.workers:
            config = worker.config()
            assert config.get("workflow_task_poller_behavior") == PollerBehaviorSimpleMaximum(7)
            assert config.get("activity_task_poller_behavior") == PollerBehaviorSimpleMaximum(3)


def test_pollers_default_to_32_and_workflow_pollers_to_at_least_2() -> None:
    defaults = Settings()
    assert (defaults.workflow_task_pollers, defaults.activity_task_pollers) == (32, 32)
    with pytest.raises(pydantic.ValidationError):
        Settings(workflow_task_pollers=1)  # one poll cannot serve both the shared and the sticky queue
    with pytest.raises(pydantic.ValidationError):
        Settings(activity_task_pollers=0)


async def test_the_ack_worker_runs_as_many_acks_at_once_as_the_pulsar_pool(
    settings: Settings, temporal_client: Client
) -> None:
    # Every deletion ends in an ack on the ingest's own queue: with fewer slots there than the pool has
    # threads, acks queue for a slot under a backlog.
    custom = settings.with_overrides(
        pulsar_concurrency=23,
        topic=f"{settings.topic}-ack-slots",
        task_queue_prefix=f"{settings.task_queue_prefix}-ack-slots",
    )
    async with running_pools(custom, temporal_client, pools=("pulsar",)) as running:
        by_queue = {worker.config().get("task_queue"): worker.config() for worker in running.workers}
        assert running.ack_queue in by_queue
        assert by_queue[running.ack_queue].get("max_concurrent_activities") == 23
        assert by_queue[custom.task_queue("pulsar")].get("max_concurrent_activities") == 23
