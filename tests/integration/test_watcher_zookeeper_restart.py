"""The watcher across a ZooKeeper restart (kill -9, then start on the same data).

A restart would disturb every other user of the shared stack's ZooKeeper: this module starts a private one
on its own port and state directory (Temporal, Pulsar and S3 stay the shared stack's), and stops it at the
end unless it was already running.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from devstack import ports
from devstack.faults import ServiceControl
from devstack.stack import Stack, StackEndpoints, StackPorts, default_state_dir
from ledger_deletion.formats.managed_ledger import managed_ledger_name
from tests.integration.test_watcher_restarts import SLACK, read_requests
from tests.integration.watch_support import DELAY, TopicReader, corner, seen, until, watching

pytestmark = pytest.mark.stack

ZOOKEEPER_PORT = ports.block(ports.WATCH_ZK_RESTART).zookeeper  # a block of its own (devstack.ports)


@pytest.fixture(scope="module")
def private_zookeeper() -> Iterator[Stack]:
    state_dir = Path(
        os.environ.get(
            "LEDGER_DELETION_WATCH_ZK_STACK_DIR", str(default_state_dir().with_name("watch-zk-stack"))
        )
    )
    stack = Stack(state_dir, StackPorts(zookeeper=ZOOKEEPER_PORT))
    was_running = stack.pid("zookeeper") is not None
    stack.up(install=False, only=("zookeeper",))
    yield stack
    if not was_running:
        stack.down()


async def test_a_zookeeper_restart_leaves_nothing_unwatched(
    stack: StackEndpoints,
    s3: Any,
    temporal_client: Client,
    new_ledger_id: Any,
    private_zookeeper: Stack,
) -> None:
    zookeeper = private_zookeeper.endpoints().zookeeper
    with corner(stack, s3, new_ledger_id, zookeeper=zookeeper) as c:
        b = c.broker
        topic = "public/default/restarted"
        path = f"/managed-ledgers/{managed_ledger_name(topic)}"
        ids = b.create_topic(topic, 6)
        reader = TopicReader(c.settings)
        async with watching(c.settings, temporal_client) as watcher:
            await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
            b.trim(topic, [ids[0]], bk_delete_fails=[ids[0]])
            await seen(watcher, c.zk, path)

            ServiceControl(private_zookeeper).kill9("zookeeper")
            await asyncio.sleep(1)
            await asyncio.to_thread(private_zookeeper.up, False, only=("zookeeper",))
            # At once, while the watcher may still be reconnecting: the resync's diff finds it.
            b.trim(topic, [ids[1]], bk_delete_fails=[ids[1]])
            await until(lambda: watcher.stats.resyncs >= 2, 60, "the resync after the restart")
            # Then through the watches, added again.
            b.trim(topic, [ids[2]], bk_delete_fails=[ids[2]])
            await seen(watcher, c.zk, path)
            keys = await read_requests(reader, 3, DELAY + 2 * SLACK)
        reader.close()
        assert keys == sorted(("LEDGER", i) for i in ids[:3]), watcher.stats
