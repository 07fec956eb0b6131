"""The ``ledger-deletion worker`` command as operators run it: a process, configured by the environment,
stopped with SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.converter import DataConverter

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import DeletionInput, Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import wait_for_result

pytestmark = pytest.mark.stack


def worker_command() -> list[str]:
    installed = shutil.which("ledger-deletion", path=str(Path(sys.executable).parent))
    return [installed] if installed else [sys.executable, "-m", "ledger_deletion.cli"]


async def test_worker_process_deletes_then_stops_cleanly_on_sigterm(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client, stack, tmp_path
) -> None:
    run = uuid.uuid4().hex[:6]
    env = {
        **os.environ,
        **stack.as_env(),
        "LEDGER_DELETION_TOPIC": f"{settings.topic}-proc-{run}",
        "LEDGER_DELETION_TASK_QUEUE_PREFIX": f"{settings.task_queue_prefix}-proc-{run}",
        "LEDGER_DELETION_METRICS_PORT": "0",
        "LEDGER_DELETION_TEMPORAL_METRICS_PORT": "0",
        "LEDGER_DELETION_SHUTDOWN_GRACE_SECONDS": "5",
        "LEDGER_DELETION_STEP_TIMEOUT_SECONDS": '{"check_topic": 12}',
    }
    mine = settings.with_overrides(topic=env["LEDGER_DELETION_TOPIC"])
    topic = f"proc/ns-{run}/t"
    ids = cluster.new_ledger_ids(4)
    cluster.create_topic(topic, ids)
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [*worker_command(), "worker", "--pool", "all"], env=env, stdout=log, stderr=log
    )
    try:
        with RequestPublisher(mine) as publisher:
            requests = cluster.trim(topic, ids[:3], publisher.publish)
        results = [await wait_for_result(temporal_client, r.workflow_id) for r in requests]
        assert [r.outcome for r in results] == [Outcome.DELETED] * 3
        assert all(r.messages_acked == 1 for r in results)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        assert time.monotonic() - started < 60
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    assert not any(cluster.ledger_exists(i) for i in ids[:3]) and cluster.ledger_exists(ids[3])
    output = (tmp_path / "worker.log").read_text()
    assert "pools" in output  # it logged its start and stop
    # The step timeout set in the environment reached the workflows, and the log says so.
    assert "start-to-close check_topic 12 s, " in output
    # check_topic runs as a local activity, whose timeout no event records: it is the run's input policy's
    # (test_a_quick_step_that_hangs_is_retried_after_its_own_timeout shows the workflow applies it).
    history = await temporal_client.get_workflow_handle(requests[0].workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (inp,) = DataConverter.default.payload_converter.from_payloads(
        list(started.input.payloads), [DeletionInput]
    )
    assert inp.policy.step_timeout_seconds["check_topic"] == 12
