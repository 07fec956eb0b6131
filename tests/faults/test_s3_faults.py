"""Tiered storage misbehaving: S3 answering 500 / 503 / SlowDown for a while, or not reachable at all.

The service reaches moto through :class:`devstack.faults.S3FaultProxy`. botocore retries a few times by
itself; when that is not enough the activity raises ObjectStoreUnavailable, a transient error, and Temporal
retries the step with backoff until S3 is back. Nothing may be dead-lettered for a fault that ends.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import S3FaultProxy
from ledger_deletion.settings import Settings
from tests.faults.support import run_batch
from tests.support import running_pools

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("mode", ["mixed", "SlowDown"])
async def test_s3_errors_for_a_while(
    mode: str,
    fault_client: Client,
    fault_settings: Settings,
    s3_proxy: S3FaultProxy,
    cluster: SimulatedCluster,
) -> None:
    failed_before = s3_proxy.failed

    async def fault() -> None:
        s3_proxy.fail(mode, seconds=8.0)  # type: ignore[arg-type]
        await asyncio.sleep(8.0)

    async with running_pools(fault_settings, fault_client):
        report = await run_batch(fault_client, fault_settings, cluster, fault, units=1, seed=11)
    await report.finish(fault_settings)
    report.assert_promises()
    assert s3_proxy.failed > failed_before, "the fault never hit a request"


async def test_s3_unreachable_then_back(
    fault_client: Client, fault_settings: Settings, s3_proxy: S3FaultProxy, cluster: SimulatedCluster
) -> None:
    async def fault() -> None:
        s3_proxy.go_down()  # connection refused, open keep-alive connections cut
        await asyncio.sleep(8.0)
        s3_proxy.come_back()

    async with running_pools(fault_settings, fault_client):
        report = await run_batch(fault_client, fault_settings, cluster, fault, units=1, seed=12)
    await report.finish(fault_settings)
    report.assert_promises()
