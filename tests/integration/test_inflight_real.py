"""``ledger-deletion inflight`` and its gauge on a real broker's backlog.

A pulsar-lite broker of this module's own (its metrics endpoint on) holds the deletion topics; the admin
emulator answers their stats in Pulsar's shapes from it. The system topic is configured by its full name,
which the admin path was once built from wrongly ("5 parts, expected 3 or 4"), so the backlog was never
measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.client import Client

from devstack.admin_emulator import AdminEmulator
from devstack.pulsar_lite import PrivatePulsarLite
from devstack.stack import StackEndpoints
from ledger_deletion.observability import metrics
from ledger_deletion.ops import inflight
from ledger_deletion.settings import Settings
from tests.support import private_emulator

pytestmark = pytest.mark.stack

SYSTEM_BACKLOG, TENANT_BACKLOG = 5, 3


@pytest.fixture(scope="module")
def lite() -> Iterator[PrivatePulsarLite]:
    with PrivatePulsarLite() as broker:
        yield broker


@pytest.fixture(scope="module")
def admin(stack: StackEndpoints, lite: PrivatePulsarLite) -> Iterator[AdminEmulator]:
    with private_emulator(stack.zookeeper, pulsar_metrics=lite.metrics_url) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def backlogged(settings: Settings, lite: PrivatePulsarLite, admin: AdminEmulator) -> Settings:
    """Settings on that broker, with messages published to both deletion topics and not consumed."""
    run = uuid.uuid4().hex[:8]
    configured = settings.with_overrides(
        pulsar_url=lite.url,
        pulsar_admin_url=admin.urls[0],
        pulsar_cluster="standalone",
        admin_trusted_hosts="",
        topic=f"persistent://pulsar/system/__ledger_deletion_{run}",
        tenant_topics=f"persistent://acme/deletions/requests-{run}",
    )
    client = pulsar.Client(lite.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        for topic, count in ((configured.topic, SYSTEM_BACKLOG), (configured.tenant_topics, TENANT_BACKLOG)):
            # The service's subscription exists (it is how the service reads); nobody consumes now.
            client.subscribe(topic, configured.subscription, consumer_type=pulsar.ConsumerType.Shared).close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(count):
                producer.send(f"request {i}".encode())
            producer.close()
    finally:
        client.close()
    return configured


async def measured(client: Client, settings: Settings) -> inflight.InflightReport:
    """The estimate once pulsar-lite's gauges (refreshed every few seconds) show the whole backlog."""
    deadline = time.monotonic() + 30
    while True:
        report = await inflight.estimate(client, settings)
        # Other tenants' running workflows (the shared Temporal) come without a backlog: not compared.
        backlogs = {t.tenant: t.backlog for t in report.tenants.values() if t.backlog is not None}
        wanted = {inflight.SYSTEM: SYSTEM_BACKLOG, "acme": TENANT_BACKLOG}
        if backlogs == wanted or time.monotonic() > deadline:
            return report
        await asyncio.sleep(0.5)


async def test_the_estimate_counts_the_subscriptions_backlog(
    temporal_client: Client, backlogged: Settings
) -> None:
    report = await measured(temporal_client, backlogged)
    assert report.backlog_error == ""
    assert report.tenants[inflight.SYSTEM].backlog == SYSTEM_BACKLOG
    assert report.tenants["acme"].backlog == TENANT_BACKLOG
    assert report.total >= SYSTEM_BACKLOG + TENANT_BACKLOG


async def test_the_command_shows_it(stack: StackEndpoints, backlogged: Settings) -> None:
    await measured(await Client.connect(stack.temporal_address), backlogged)  # the gauges caught up
    env = {
        **os.environ,
        **stack.as_env(),
        "LEDGER_DELETION_PULSAR_URL": backlogged.pulsar_url,
        "LEDGER_DELETION_PULSAR_ADMIN_URL": backlogged.pulsar_admin_url,
        "LEDGER_DELETION_ADMIN_TRUSTED_HOSTS": "",
        "LEDGER_DELETION_TOPIC": backlogged.topic,
        "LEDGER_DELETION_TENANT_TOPICS": backlogged.tenant_topics,
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ledger-deletion"), "inflight", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    assert shown["backlog_error"] == "", shown
    backlogs = {row["tenant"]: row["backlog"] for row in shown["tenants"]}
    assert backlogs[inflight.SYSTEM] == SYSTEM_BACKLOG and backlogs["acme"] == TENANT_BACKLOG


async def test_the_estimate_is_a_gauge(
    temporal_client: Client, backlogged: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await measured(temporal_client, backlogged)
    reader = InMemoryMetricReader()
    monkeypatch.setattr(metrics, "_current", metrics.Metrics(MeterProvider(metric_readers=[reader])))
    stop = asyncio.Event()
    refresher = asyncio.create_task(inflight.report_forever(temporal_client, backlogged, stop, 0.2))
    try:
        deadline = time.monotonic() + 30
        values: dict[str, float] = {}
        while time.monotonic() < deadline and values.get(inflight.SYSTEM, 0) < SYSTEM_BACKLOG:
            await asyncio.sleep(0.3)
            data = reader.get_metrics_data()
            for resource in data.resource_metrics if data else []:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name == "ledger_deletion_inflight_estimate":
                            values = {
                                str((p.attributes or {})["tenant"]): p.value  # type: ignore[union-attr]
                                for p in metric.data.data_points
                            }
    finally:
        stop.set()
        await refresher
    assert values[inflight.SYSTEM] >= SYSTEM_BACKLOG and values["acme"] >= TENANT_BACKLOG
