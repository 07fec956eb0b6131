"""The stack serves exactly the settings' defaults, and every service answers."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pulsar
import pytest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import ListTaskQueuePartitionsRequest
from temporalio.client import Client

from devstack.stack import _PIP_REQUIREMENTS, SERVICES, Stack, StackEndpoints, StackPorts, default_state_dir
from ledger_deletion.settings import DEFAULT_TOPIC, Settings


def test_default_endpoints_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in StackEndpoints.for_ports(StackPorts()).as_env():
        monkeypatch.delenv(name, raising=False)
    defaults = Settings()
    endpoints = StackEndpoints.for_ports(StackPorts())
    assert endpoints.temporal_address == defaults.temporal_address
    assert endpoints.temporal_ui_url == defaults.temporal_ui_url
    assert endpoints.pulsar_url == defaults.pulsar_url
    assert endpoints.pulsar_admin_url == defaults.pulsar_admin_url
    assert endpoints.zookeeper == defaults.zookeeper
    assert endpoints.s3_endpoint == defaults.s3_endpoint
    assert endpoints.offload_bucket == defaults.offload_bucket


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
def test_deletion_topic_has_four_partitions_and_bucket_exists(stack: StackEndpoints) -> None:
    client = pulsar.Client(stack.pulsar_url, operation_timeout_seconds=10)
    try:
        assert len(client.get_topic_partitions(DEFAULT_TOPIC)) == 4
    finally:
        client.close()
    stack.s3_client().head_bucket(Bucket=stack.offload_bucket)


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


def test_self_install_covers_the_stack_extra() -> None:
    """``Stack.up`` installs what is missing from the ``stack`` extra: the two lists must not drift apart."""
    extra = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert sorted(_PIP_REQUIREMENTS) == sorted(extra["optional-dependencies"]["stack"])
