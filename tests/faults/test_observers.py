"""The outside observers the fault tests trust: a count of zero from them must mean zero.

``count_redeliverable`` proves "nothing left unacked" in the kill tests; if it undercounted, a lost ack
would pass unnoticed. Here no pool consumes, so every published request is still unacked and must be
counted, on every call (counting acks nothing).
"""

from __future__ import annotations

import asyncio

import pytest

from devstack.cluster import SimulatedCluster
from devstack.faults import count_redeliverable
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher

pytestmark = pytest.mark.stack


async def test_count_redeliverable_counts_every_unacked_request_and_acks_none(
    fault_settings: Settings, cluster: SimulatedCluster
) -> None:
    topic = f"observe-{fault_settings.task_queue_prefix[-6:]}/ns/orders"
    ids = cluster.new_ledger_ids(40)
    cluster.create_topic(topic, ids)
    with RequestPublisher(fault_settings) as publisher:
        for request in cluster.requests_for_trim(topic, ids):
            publisher.publish(request)

    first = await asyncio.to_thread(count_redeliverable, fault_settings, 1.0)
    second = await asyncio.to_thread(count_redeliverable, fault_settings, 1.0, 100_000, 1)
    assert (first, second) == (40, 40)
