"""The stack's environment sets every endpoint the service needs, and every service answers."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pulsar
import pytest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import ListTaskQueuePartitionsRequest
from temporalio.client import Client

from devstack import ports
from devstack.stack import (
    _PIP_REQUIREMENTS,
    PORTS_FILE,
    SERVICES,
    Stack,
    StackEndpoints,
    StackError,
    StackPorts,
    _cmdline_matches,
    default_state_dir,
    recorded_ports,
)
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import DEFAULT_TOPIC, ENDPOINTS, Settings


def test_stack_env_sets_every_endpoint_the_service_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoints = StackEndpoints.for_ports(StackPorts())
    for name, value in endpoints.as_env().items():
        monkeypatch.setenv(name, value)
    settings = load_settings(require=ENDPOINTS)  # refused if any endpoint were left out
    fields = {*ENDPOINTS, "offload_bucket"}
    assert settings.model_dump(include=fields) == endpoints.settings().model_dump(include=fields)
    assert settings.s3_endpoint == endpoints.s3_endpoint and settings.zookeeper == endpoints.zookeeper


def test_env_round_trips_through_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoints = StackEndpoints.for_ports(StackPorts(temporal=1, pulsar=2, zookeeper=3, s3=4, admin=5))
    for name, value in endpoints.as_env().items():
        assert shlex.quote(value) == value  # nothing to quote in `export NAME=value`
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.temporal_address == "127.0.0.1:1"
    assert settings.pulsar_url == "pulsar://127.0.0.1:2"
    assert settings.zookeeper == "127.0.0.1:3"
    assert settings.s3_endpoint == "http://127.0.0.1:4"
    assert settings.pulsar_admin_url == "http://127.0.0.1:5"


@pytest.mark.stack
def test_every_service_is_healthy(stack: StackEndpoints) -> None:
    rows = Stack(default_state_dir()).status()
    assert [row.service for row in rows] == list(SERVICES)
    assert all(row.running and row.healthy for row in rows), rows


@pytest.mark.stack
def test_deletion_topic_has_four_partitions_and_bucket_exists(stack: StackEndpoints, s3: Any) -> None:
    client = pulsar.Client(stack.pulsar_url, operation_timeout_seconds=10)
    try:
        assert len(client.get_topic_partitions(DEFAULT_TOPIC)) == 4
    finally:
        client.close()
    s3.head_bucket(Bucket=stack.offload_bucket)


async def test_task_queues_have_one_partition(stack: StackEndpoints) -> None:
    """The embedded server runs every task queue as one partition: in one process, more only forward tasks."""
    client = await Client.connect(stack.temporal_address)
    reply = await client.workflow_service.list_task_queue_partitions(
        ListTaskQueuePartitionsRequest(
            namespace="default", task_queue=TaskQueue(name=Settings().task_queue("workflow"))
        )
    )
    assert len(reply.workflow_task_queue_partitions) == 1
    assert len(reply.activity_task_queue_partitions) == 1


def test_self_install_covers_the_devstack_dependencies() -> None:
    """``Stack.up`` installs what the dev stack's dependencies name: the two lists must not drift apart."""
    pyproject = Path(__file__).parents[2] / "devstack" / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    servers = [d for d in project["dependencies"] if not d.startswith("ledger-deletion")]
    assert sorted(_PIP_REQUIREMENTS) == sorted(servers)


# A stack on ports of its own (tests, benchmarks): far from every stack this suite or a benchmark runs.
_OTHER_PORTS = ports.block(ports.OTHER_STACK)


# What the stack looks for in its S3 server's command line on those ports.
S3_MARKERS = ("moto.server", str(_OTHER_PORTS.s3))


@pytest.fixture
def s3_on_other_ports(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``tmp_path`` as the state dir of a stack up on other ports, its S3 server a sleeping stand-in.

    The stand-in's command line carries the markers by which the stack knows its S3 server's pid file.
    """
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / PORTS_FILE).write_text(json.dumps(asdict(_OTHER_PORTS)))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", *S3_MARKERS],
        start_new_session=True,
    )
    # Popen returns a moment before /proc/<pid>/cmdline shows the new argv (devstack.stack._pid says why);
    # a stack that reads it then takes the stand-in for someone else's process (seen once in CI). Wait on the
    # very check the stack makes.
    deadline = time.monotonic() + 10
    while not _cmdline_matches(proc.pid, S3_MARKERS) and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "run" / "s3.pid").write_text(f"{proc.pid}\n")
    yield proc
    proc.kill()
    proc.wait()


def test_down_finds_a_stack_on_other_ports_from_its_state_dir(
    tmp_path: Path, s3_on_other_ports: subprocess.Popen[bytes]
) -> None:
    """``stack down --state-dir`` (no ports given) stops the S3 server of a stack up on other ports."""
    assert Stack(tmp_path).ports == _OTHER_PORTS
    assert Stack(tmp_path).down(timeout=5) == ["s3"]
    assert s3_on_other_ports.wait(timeout=5) is not None


def test_down_stops_what_was_started_whatever_ports_the_caller_names(
    tmp_path: Path, s3_on_other_ports: subprocess.Popen[bytes]
) -> None:
    """A benchmark moved to other ports first stops its old stack: the S3 server on the old port goes too."""
    assert Stack(tmp_path, StackPorts()).down(timeout=5) == ["s3"]
    assert s3_on_other_ports.wait(timeout=5) is not None


def test_up_refuses_to_move_a_running_stack_to_other_ports(
    tmp_path: Path, s3_on_other_ports: subprocess.Popen[bytes]
) -> None:
    with pytest.raises(StackError, match="runs s3 on other ports"):
        Stack(tmp_path, StackPorts()).up(install=False, timeout=1)
    assert s3_on_other_ports.poll() is None  # left alone, and still recorded
    assert recorded_ports(tmp_path) == _OTHER_PORTS


def test_state_dir_without_recorded_ports_means_the_defaults(tmp_path: Path) -> None:
    assert Stack(tmp_path).ports == StackPorts()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / PORTS_FILE).write_text("not json")
    assert Stack(tmp_path).ports == StackPorts()
