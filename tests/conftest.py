"""Session fixtures: one embedded stack per test session, shared by every test that needs it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client


@pytest.fixture(scope="session")
async def temporal_client() -> AsyncIterator[Client]:
    address = os.environ.get("TEST_TEMPORAL_ADDRESS", "127.0.0.1:27233")
    yield await Client.connect(address)
