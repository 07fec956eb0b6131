"""Fixtures for the operator tests: the service running with its observability wired in, as in production.

The session's ``service`` fixture runs the pools on a plain client. Here a second, module-independent set of
pools runs on a client that carries the tracing and metrics interceptors (what ``ledger-deletion worker``
builds), on its own topics and task queues, with one per-namespace deletion topic (tenant isolation).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from devstack.stack import StackEndpoints
from ledger_deletion.observability import metrics, tracing
from ledger_deletion.observability.setup import interceptors
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.operators.support import Observed
from tests.support import running_pools


@pytest.fixture(scope="session")
def span_exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracing.install("ledger-deletion-tests", extra_processors=(SimpleSpanProcessor(exporter),))
    return exporter


@pytest.fixture(scope="session")
def metrics_url() -> str:
    metrics.install(0, "127.0.0.1")
    return f"http://127.0.0.1:{metrics.serving_port()}/metrics"


@pytest.fixture(scope="session")
def observed_settings(settings: Settings) -> Settings:
    run = uuid.uuid4().hex[:8]
    return settings.with_overrides(
        topic=f"persistent://pulsar/system/__ledger_deletion_ops_{run}",
        task_queue_prefix=f"ld-ops-{run}",
        tenant_topics=f"persistent://ops-{run}/isolated/__ledger_deletion",
        # A long enough in-use grace for the inflight test to see a running workflow, then let it finish.
        in_use_rechecks=6,
        in_use_recheck_seconds=4.0,
    )


@pytest.fixture(scope="session")
async def observed(
    stack: StackEndpoints,
    observed_settings: Settings,
    span_exporter: InMemorySpanExporter,
    metrics_url: str,
) -> AsyncIterator[Observed]:
    client = await Client.connect(stack.temporal_address, interceptors=interceptors(observed_settings))
    async with running_pools(observed_settings, client) as running:
        yield Observed(
            settings=observed_settings,
            client=client,
            running=running,
            spans=span_exporter,
            metrics_url=metrics_url,
            tenant_topic=observed_settings.tenant_topics,
        )


@pytest.fixture(scope="session")
def observed_publisher(observed_settings: Settings) -> Iterator[RequestPublisher]:
    with RequestPublisher(observed_settings) as publisher:
        yield publisher


@pytest.fixture
def cli_env(observed_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for the CLI so ``load_settings()`` sees the observed service's settings."""
    s = observed_settings
    env = {
        "TEMPORAL_ADDRESS": s.temporal_address,
        "LEDGER_DELETION_PULSAR_URL": s.pulsar_url,
        "LEDGER_DELETION_PULSAR_ADMIN_URL": s.pulsar_admin_url,
        "LEDGER_DELETION_TOPIC": s.topic,
        "LEDGER_DELETION_TENANT_TOPICS": s.tenant_topics,
        "LEDGER_DELETION_TASK_QUEUE_PREFIX": s.task_queue_prefix,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, **env}
