"""Fixtures of the fault tests: a private embedded stack, an S3 fault proxy, pools as killable processes.

These tests kill and restart services (ZooKeeper, Temporal, pulsar-lite), so they must never share a stack
with other test sessions or a developer's demo: they get their own one, on their own ports and state dir
(``$LEDGER_DELETION_FAULTS_STACK_DIR``, default ``<default stack dir>/../faults-stack``). Each test gets its
own deletion topic and task queues, so a test only ever sees its own messages and workflows.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from devstack import ports
from devstack.faults import PoolSet, S3FaultProxy, ServiceControl
from devstack.soak import PEER_ROOT
from devstack.stack import (
    DUMMY_AWS_CREDENTIALS,
    S3_REGION,
    SERVICES,
    Stack,
    StackEndpoints,
    StackPorts,
    default_state_dir,
)
from ledger_deletion.settings import Settings
from tests.faults.support import make_fault_settings, started_pools
from tests.support import ClusterStore

# A block of its own (devstack.ports), apart from the shared stack's and every other private stack's: one per
# pytest-xdist worker, each with its own state directory.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
FAULT_PORTS: StackPorts = ports.block(ports.faults(_WORKER))
PROXY_PORT = ports.s3_proxy(ports.faults(_WORKER))


@pytest.fixture(scope="session")
def fault_stack() -> Iterator[Stack]:
    state_dir = Path(
        os.environ.get("LEDGER_DELETION_FAULTS_STACK_DIR", str(default_state_dir().with_name("faults-stack")))
    )
    if _WORKER and _WORKER != "gw0":
        state_dir = state_dir.with_name(f"{state_dir.name}-{_WORKER}")
    stack = Stack(state_dir, FAULT_PORTS)
    was_running = any(stack.pid(service) is not None for service in SERVICES)
    stack.up()
    for name, value in {**DUMMY_AWS_CREDENTIALS, "AWS_DEFAULT_REGION": S3_REGION}.items():
        os.environ.setdefault(name, value)
    yield stack
    # A second whole stack (a JVM, a Temporal server, ...) has no use once the session ends; one that was
    # already running (a developer iterating on these tests) is left as it was found.
    if not was_running:
        stack.down()


@pytest.fixture(scope="session")
def fault_endpoints(fault_stack: Stack) -> StackEndpoints:
    endpoints = fault_stack.endpoints()
    # The second Pulsar cluster every test's settings declare (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH) has a
    # store from the start, whichever module a worker runs first: a declared store without /managed-ledgers is
    # refused (adapters/zookeeper.py), and a batch's peer would otherwise create it only when one is built.
    client = endpoints.zookeeper_client()
    try:
        client.ensure_path(f"{PEER_ROOT}/managed-ledgers")
    finally:
        client.stop()
        client.close()
    return endpoints


@pytest.fixture(scope="session")
def services(fault_stack: Stack) -> ServiceControl:
    return ServiceControl(fault_stack)


@pytest.fixture(scope="session")
def s3_proxy(fault_endpoints: StackEndpoints) -> Iterator[S3FaultProxy]:
    proxy = S3FaultProxy(fault_endpoints.s3_endpoint, port=PROXY_PORT).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def fault_settings(fault_endpoints: StackEndpoints, s3_proxy: S3FaultProxy) -> Settings:
    """Per-test topic and task queues."""
    return make_fault_settings(fault_endpoints, s3_proxy)


@pytest.fixture(scope="module")
def module_settings(fault_endpoints: StackEndpoints, s3_proxy: S3FaultProxy) -> Settings:
    """Per-module topic and task queues (for tests that share one set of pool processes)."""
    return make_fault_settings(fault_endpoints, s3_proxy)


@pytest.fixture(scope="session")
async def fault_client(fault_endpoints: StackEndpoints) -> Client:
    return await Client.connect(fault_endpoints.temporal_address)


@pytest.fixture(scope="session")
def fault_zk(fault_endpoints: StackEndpoints) -> Iterator[Any]:
    client = fault_endpoints.zookeeper_client()
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def fault_s3(fault_endpoints: StackEndpoints) -> Iterator[Any]:
    client = fault_endpoints.s3_client()
    yield client
    client.close()  # its pooled connections, not left for the garbage collector


@pytest.fixture(scope="session")
def cluster_store(fault_zk: Any, fault_s3: Any, fault_endpoints: StackEndpoints) -> ClusterStore:
    """The shared ``cluster`` and ``make_cluster`` write to the private stack, never to the shared one. Kept:
    the private stack belongs to these tests, and what a test leaves behind is evidence."""
    return ClusterStore(fault_zk, fault_s3, fault_endpoints.offload_bucket, keep=True)


@pytest.fixture(scope="module")
async def pool_processes(module_settings: Settings, fault_stack: Stack) -> AsyncIterator[PoolSet]:
    """The four pools, one process each (killable with SIGKILL), on the module's topic and queues.

    Starting four Python processes costs ~10 s on two cores, so the tests of a module share them.
    """
    async with started_pools(module_settings, fault_stack) as pool_set:
        yield pool_set
