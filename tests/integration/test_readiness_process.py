"""A pool process's ``/ready`` follows its connection to Temporal: the readiness probe's ground truth.

``/metrics`` answers for as long as the process lives; ``/ready`` must say 503 while the process cannot reach
Temporal, and 200 again once it can, without a restart. The pool runs as operators run it (``ledger-deletion
worker``), its Temporal address behind a proxy the test cuts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from devstack.stack import StackEndpoints
from devstack.tcp_proxy import TcpProxy
from ledger_deletion.settings import Settings
from tests.integration.test_worker_process import worker_command

pytestmark = pytest.mark.stack


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ready(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read())
    except OSError as exc:  # not serving yet
        return 0, {"error": str(exc)}


def until(
    predicate: Callable[[tuple[int, dict[str, object]]], bool], url: str, timeout: float
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    seen: tuple[int, dict[str, object]] = (0, {})
    while time.monotonic() < deadline:
        seen = ready(url)
        if predicate(seen):
            return seen[1]
        time.sleep(0.5)
    raise AssertionError(f"/ready never became as expected; last answer {seen}")


def test_ready_follows_the_connection_to_temporal(
    settings: Settings, stack: StackEndpoints, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    proxy = TcpProxy(stack.temporal_address).start()
    port = free_port()
    env = {
        **os.environ,
        **stack.as_env(),
        "TEMPORAL_ADDRESS": proxy.address,
        "LEDGER_DELETION_TOPIC": f"{settings.topic}-ready-{run}",
        "LEDGER_DELETION_TASK_QUEUE_PREFIX": f"{settings.task_queue_prefix}-ready-{run}",
        "LEDGER_DELETION_METRICS_HOST": "127.0.0.1",
        "LEDGER_DELETION_METRICS_PORT": str(port),
        "LEDGER_DELETION_TEMPORAL_METRICS_PORT": "0",
        "LEDGER_DELETION_SHUTDOWN_GRACE_SECONDS": "1",
    }
    url = f"http://127.0.0.1:{port}/ready"
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [*worker_command(), "worker", "--pool", "pulsar"], env=env, stdout=log, stderr=log
    )
    try:
        body = until(lambda seen: seen[0] == 200, url, 90)
        assert body == {"ready": True, "checks": {"temporal": "ok", "pulsar": "ok"}}

        proxy.cut()
        body = until(lambda seen: seen[0] == 503, url, 60)
        checks = body["checks"]
        assert isinstance(checks, dict) and checks["temporal"] != "ok" and checks["pulsar"] == "ok", body
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3)
        with metrics:
            assert metrics.status == 200  # alive all along: only readiness says it cannot work

        proxy.heal()
        until(lambda seen: seen[0] == 200, url, 60)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        log.close()
        proxy.stop()
