"""Fixtures of the benchmark's own tests: the shared embedded stack (``ledger-deletion stack up``), settings
with a topic and task queues of this session's own, and ledger ids nobody else uses."""

from __future__ import annotations

import itertools
import os
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.cluster import SimulatedCluster
from devstack.stack import Stack, StackEndpoints, default_state_dir
from ledger_deletion.settings import Settings


@pytest.fixture(scope="session")
def stack() -> StackEndpoints:
    endpoints = Stack(Path(os.environ.get("LEDGER_DELETION_STACK_DIR", default_state_dir()))).up()
    # boto3 reads credentials from the standard chain: point it at moto's dummy ones.
    for name, value in endpoints.as_env().items():
        if name.startswith("AWS_"):
            os.environ.setdefault(name, value)
    return endpoints


@pytest.fixture(scope="session")
def settings(stack: StackEndpoints) -> Settings:
    session = uuid.uuid4().hex[:8]
    return stack.settings(
        topic=f"persistent://pulsar/system/__ledger_deletion_bench_test_{session}",
        task_queue_prefix=f"ld-bench-test-{session}",
    )


@pytest.fixture(scope="session")
def cluster(stack: StackEndpoints) -> Iterator[SimulatedCluster]:
    zk = stack.zookeeper_client()
    yield SimulatedCluster(zk, stack.s3_client(), bucket=stack.offload_bucket)
    zk.stop()
    zk.close()


_ids = itertools.count(random.randrange(10**6, 2**31 - 10**8, 1000))


@pytest.fixture
def new_ledger_id() -> Callable[[], int]:
    """Allocator of ledger ids nobody else in this session uses."""
    return lambda: next(_ids)
