"""Fixtures for the stack tests: a simulated cluster whose writes are removed after each test module.

The stack itself (``stack``, ``zk``, ``s3``) comes from the session fixtures of ``tests/conftest.py``, which
reuse a running stack or start one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devstack.admin_emulator import owner_index
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints


@pytest.fixture(scope="module")
def cluster(stack: StackEndpoints, zk: Any, s3: Any) -> Iterator[SimulatedCluster]:
    simulated = SimulatedCluster(zk, s3, bucket=stack.offload_bucket)
    yield simulated
    simulated.cleanup()  # only what this module wrote: other sessions may share the stack


@pytest.fixture
def topic_owned_by() -> Callable[[int], str]:
    """A fresh ``public/default/<name>`` whose owner is broker ``index`` (0 = A, 1 = B) of the emulator."""

    def make(index: int) -> str:
        while True:
            name = f"public/default/stack-test-{uuid.uuid4().hex[:10]}"
            if owner_index(name) == index:
                return name

    return make
