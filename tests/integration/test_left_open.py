"""A data ledger a broker left OPEN when it died mid-rollover (issue 39, section 2): nothing will close it, so
it is reported with what an operator runs, and acked, rather than dead-lettered for replays without end."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from devstack.cluster import LEDGER_LIFETIME_MS, SimulatedCluster
from ledger_deletion.contracts import Outcome
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.submit import RequestPublisher
from tests.support import wait_for_result, wait_until_all_acked
from workers.pools import RunningPools

pytestmark = pytest.mark.stack


async def test_an_open_ledger_older_than_the_newest_listed_is_reported_with_the_command_to_close_it(
    cluster: SimulatedCluster,
    service: RunningPools,
    publisher: RequestPublisher,
    temporal_client: Client,
    zk: Any,
) -> None:
    topic = f"leftopen/ns-{uuid.uuid4().hex[:6]}/orders"
    [abandoned] = cluster.new_ledger_ids()  # the rollover's new ledger, never listed, its broker gone
    created = cluster.create_topic(topic, cluster.new_ledger_ids(2))  # the topic reloaded: newer ledgers
    zk.create(
        ledger_path(abandoned),
        build_pulsar_ledger_metadata(
            managed_ledger_custom_metadata(created.managed_ledger_name),
            state="OPEN",
            ctime=int(time.time() * 1000) - LEDGER_LIFETIME_MS,
        ),
        makepath=True,
    )
    try:
        request = PendingDeleteLedgerInfo(
            created.name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, abandoned
        )
        publisher.publish(request)
        result = await wait_for_result(temporal_client, request.workflow_id)
        assert result.outcome is Outcome.SKIPPED_LEFT_OPEN, result
        assert f"readledger --ledgerid {abandoned} --force-recovery" in result.reason
        assert result.kept_for_replay == 0 and cluster.ledger_exists(abandoned)
        await wait_until_all_acked(service)
    finally:
        cluster.cleanup()
        zk.delete(ledger_path(abandoned))
