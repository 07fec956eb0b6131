"""The watcher across ZooKeeper restarts (kill -9, then start on the same data), one and a rolling three.

A restart would disturb every other user of the shared stack's ZooKeeper: this module starts a private one
on its own port and state directory (Temporal, Pulsar and S3 stay the shared stack's), and stops it at the
end unless it was already running.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from devstack import ports
from devstack.faults import ServiceControl
from devstack.stack import Stack, StackEndpoints, StackPorts, default_state_dir
from devstack.tcp_proxy import TcpProxy
from ledger_deletion.formats.managed_ledger import managed_ledger_name
from tests.integration.test_watcher_restarts import SLACK, ml, read_requests
from tests.integration.watch_support import DELAY, TopicReader, corner, seen, until, watching

pytestmark = pytest.mark.stack
log = logging.getLogger(__name__)

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
            # At once, while the watcher may still be reconnecting: the catch-up (or resync) finds it.
            b.trim(topic, [ids[1]], bk_delete_fails=[ids[1]])
            # The session outlives a quick restart (caught up) or not (resynced): nothing missed either way.
            await until(
                lambda: watcher.stats.resyncs + watcher.stats.catch_ups >= 2,
                60,
                "the resync after the restart",
            )
            # Then through the watches, added again.
            b.trim(topic, [ids[2]], bk_delete_fails=[ids[2]])
            await seen(watcher, c.zk, path)
            keys = await read_requests(reader, 3, DELAY + 2 * SLACK)
        reader.close()
        assert keys == sorted(("LEDGER", i) for i in ids[:3]), watcher.stats


TOPICS = 40  # of 20 ledgers each, half offloaded: a full read outweighs a reconnect's few changes
NEW_TOPIC_PATH = "/managed-ledgers/public/default/persistent/rolling-new"


async def test_a_rolling_restart_reads_less_than_one_resync_and_misses_nothing(
    stack: StackEndpoints,
    s3: Any,
    temporal_client: Client,
    new_ledger_id: Any,
    private_zookeeper: Stack,
) -> None:
    """A rolling restart of a three-server ensemble, as the watcher sees it: the server it is connected to
    goes away three times, and each time the brokers (on the other servers) change records before it is
    back. Simulated on one server: the watcher connects through a TCP proxy, cut before each kill -9 and
    healed after the changes, so every change is made while the watcher is disconnected. The session
    outlives each restart (its timeout is longer than one), so each reconnection catches up (SetWatches from
    the last zxid) instead of resyncing, and the three read fewer bytes together than the one full resync
    of the start, counted on the watcher's connections."""
    zookeeper = private_zookeeper.endpoints().zookeeper
    proxy = TcpProxy(zookeeper).start()
    try:
        with corner(stack, s3, new_ledger_id, zookeeper=zookeeper, zookeeper_timeout_seconds=30.0) as c:
            settings = c.settings.with_overrides(zookeeper=f"{proxy.address}{c.chroot}")
            b = c.broker
            topics = [f"public/default/rolling-{i}" for i in range(TOPICS)]
            half = list(range(0, 20, 2))
            ids = {t: b.create_topic(t, 20, offloaded=half) for t in topics}
            for t in topics[:3]:
                b.add_cursor(t, "sub")
            reader = TopicReader(settings)
            expected: list[tuple[str, int]] = []
            async with watching(settings, temporal_client) as watcher:
                await until(lambda: watcher.stats.resyncs >= 1, 60, "the first resync")
                full = watcher.stats.resync_bytes  # every record read, BookKeeper's ids listed

                def first_outage() -> None:  # a trim whose BookKeeper delete fails
                    t = topics[0]
                    b.trim(t, [ids[t][1]], bk_delete_fails=[ids[t][1]])
                    expected.append(("LEDGER", ids[t][1]))

                def second_outage() -> None:  # a cursor switch, and a topic created with a cursor
                    old, _ = b.switch_cursor(topics[1], "sub", delete_fails=True)
                    expected.append(("LEDGER", old))
                    b.create_topic("public/default/rolling-new", 3)
                    b.add_cursor("public/default/rolling-new", "new-sub")

                def third_outage() -> None:  # a topic deleted, a ledger and an offload left behind
                    t = topics[2]
                    b.delete_topic(t, bk_delete_fails=[ids[t][3]], offload_delete_fails=[ids[t][0]])
                    expected.append(("LEDGER", ids[t][3]))
                    expected.append(("OFFLOAD_LEDGER", ids[t][0]))

                before = watcher.zk_bytes_received
                for turn, change in enumerate((first_outage, second_outage, third_outage), start=1):
                    proxy.cut()
                    ServiceControl(private_zookeeper).kill9("zookeeper")
                    await asyncio.to_thread(private_zookeeper.up, False, only=("zookeeper",))
                    await until(lambda: c.zk.connected, 60, "the brokers' reconnection")
                    change()
                    proxy.heal()
                    await until(lambda n=turn: watcher.stats.catch_ups >= n, 60, f"catch-up {turn}")
                    await seen(watcher, c.zk, ml(topics[turn - 1]), NEW_TOPIC_PATH)
                reconnects = watcher.zk_bytes_received - before
                log.info("rolling restart: %d B over three reconnects, %d B for one resync", reconnects, full)
                # And the watches stand again.
                t = topics[3]
                b.trim(t, [ids[t][1]], bk_delete_fails=[ids[t][1]])
                expected.append(("LEDGER", ids[t][1]))
                await seen(watcher, c.zk, ml(t))
                keys = await read_requests(reader, len(expected), DELAY + 2 * SLACK)
            reader.close()
            assert watcher.stats.resyncs == 1 and watcher.stats.catch_ups == 3, watcher.stats
            assert reconnects <= full, f"three reconnects read {reconnects} B, one full resync {full} B"
            assert sorted(set(keys)) == sorted(expected), watcher.stats
    finally:
        proxy.stop()
