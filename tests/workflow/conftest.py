"""The workflow tier runs on Temporal's test environment alone (``environment.py``), one per session.

``temporal_client`` here replaces the one the embedded stack gives the other tiers; ``stack`` fails when
requested, so a workflow test that came to need ZooKeeper, S3 or Pulsar fails instead of quietly starting
them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NoReturn

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.workflow.environment import start_environment


@pytest.fixture(scope="session")
def stack() -> NoReturn:
    pytest.fail("the workflow tier runs on Temporal's test environment alone, not on the embedded stack")


@pytest.fixture(scope="session")
async def workflow_environment() -> AsyncIterator[WorkflowEnvironment]:
    async with await start_environment() as environment:
        yield environment


@pytest.fixture(scope="session")
def temporal_client(workflow_environment: WorkflowEnvironment) -> Client:
    return workflow_environment.client
