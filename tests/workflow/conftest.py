"""The workflow tier runs on Temporal's test environment alone (``environment.py``), one per session.

``temporal_client`` here replaces the one the embedded stack gives the other tiers; ``stack`` fails when
requested, so a workflow test that came to need ZooKeeper, S3 or Pulsar fails instead of quietly starting
them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.workflow.environment import start_environment
from tests.workflow.support import Fakes, Harness
from workflows.ledger_deletion import LedgerDeletionWorkflow


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


@pytest.fixture
async def harness(temporal_client: Client) -> AsyncIterator[Harness]:
    """A worker of the workflow with the fake activities (``Fakes``), on a task queue of its own."""
    fakes = Fakes()
    queue = f"wf-test-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(
            temporal_client,
            task_queue=queue,
            workflows=[LedgerDeletionWorkflow],
            activities=fakes.activities(),
            activity_executor=executor,
        ):
            yield Harness(temporal_client, queue, fakes)
