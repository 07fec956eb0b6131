"""Fixtures for the stack tests: topics owned by a chosen broker of the admin emulator.

The stack itself (``stack``, ``zk``, ``s3``) and the simulated ``cluster`` come from the shared fixtures of
``tests/fixtures.py``, which reuse a running stack or start one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from devstack.admin_emulator import owner_index


@pytest.fixture
def topic_owned_by() -> Callable[[int], str]:
    """A fresh ``public/default/<name>`` whose owner is broker ``index`` (0 = A, 1 = B) of the emulator."""

    def make(index: int) -> str:
        while True:
            name = f"public/default/stack-test-{uuid.uuid4().hex[:10]}"
            if owner_index(name) == index:
                return name

    return make
