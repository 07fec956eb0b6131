"""Nothing missed across restarts and gaps: a watcher killed with -9 and its standby, a watcher cut off
from ZooKeeper for less and for more than its session timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.recipe.lock import Lock
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError

from devstack.faults import settings_env
from devstack.stack import StackEndpoints
from devstack.tcp_proxy import TcpProxy
from ledger_deletion.formats.managed_ledger import managed_ledger_name
from ledger_deletion.settings import Settings
from tests.integration.watch_support import DELAY, Corner, TopicReader, corner, seen, until, watching

pytestmark = pytest.mark.stack

SLACK = 15.0


def ml(topic: str) -> str:
    return f"/managed-ledgers/{managed_ledger_name(topic)}"


def start_watcher_process(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    script = Path(sys.executable).parent / "ledger-deletion"
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(script), "watch"],
            env={**os.environ, **settings_env(settings)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def suspect_started(client: Client, workflow_id: str, timeout: float = 30) -> None:
    async def exists() -> bool:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError:
            return False
        return True

    deadline = time.monotonic() + timeout
    while not await exists():
        assert time.monotonic() < deadline, f"no suspect workflow {workflow_id}"
        await asyncio.sleep(0.2)


async def read_requests(reader: TopicReader, expected: int, timeout: float) -> list[tuple[str, int]]:
    """Everything on the topic once requests for ``expected`` distinct ledgers came (or ``timeout`` passed),
    and 3 s more."""
    deadline = time.monotonic() + timeout
    while len({a.key for a in reader.arrived}) < expected and time.monotonic() < deadline:
        await asyncio.to_thread(reader.drain, 1)
    await asyncio.to_thread(reader.drain, 3)  # anything more would be a request too many
    return reader.keys()


async def test_a_killed_watcher_leaves_its_suspects_waiting_and_its_standby_takes_over(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any, tmp_path: Path
) -> None:
    # A delay long enough to kill the first watcher before any of its suspects is checked.
    with corner(stack, s3, new_ledger_id, watch_delay_seconds=10.0) as c:
        b = c.broker
        topic = "public/default/killed"
        ids = b.create_topic(topic, 6, offloaded=[0])
        log = tmp_path / "watcher.log"
        first = start_watcher_process(c.settings, log)
        reader = TopicReader(c.settings)
        try:
            await until(lambda: b"resync:" in log.read_bytes(), 60, "the first watcher's resync")
            # Two orphans its suspects wait for when it dies: a BK ledger and offloaded objects.
            b.trim(topic, ids[:2], bk_delete_fails=[ids[1]], offload_delete_fails=[ids[0]])
            await suspect_started(temporal_client, f"ledger-deletion-watch/LEDGER/{ids[1]}")
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
            # While no watcher runs: a trim whose BK delete fails. The next one finds it by listing BK.
            b.trim(topic, [ids[2]], bk_delete_fails=[ids[2]])
            async with watching(c.settings, temporal_client, identifier="standby") as standby:
                # The killed watcher's session still holds the lock until it expires.
                election = Lock(c.zk, c.settings.watch_election_path)
                await until(lambda: standby.stats.resyncs >= 1, 60, "the standby's takeover")
                assert election.contenders() == ["standby"]
                keys = await read_requests(reader, 3, c.settings.watch_delay_seconds + 2 * SLACK)
                # After the takeover, the watch goes on.
                b.trim(topic, [ids[3]], bk_delete_fails=[ids[3]])
                await seen(standby, c.zk, ml(topic))
                keys = await read_requests(reader, 4, c.settings.watch_delay_seconds + SLACK)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            reader.close()
        assert keys == sorted(
            [("OFFLOAD_LEDGER", ids[0]), ("LEDGER", ids[1]), ("LEDGER", ids[2]), ("LEDGER", ids[3])]
        ), log.read_text()[-3000:]


async def test_a_standby_waits_while_the_active_watcher_runs(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    # A process hosts one worker per task queue: the standby gets a client (and SDK runtime) of its own, as
    # it would in its own process.
    other = await Client.connect(stack.temporal_address, runtime=Runtime(telemetry=TelemetryConfig()))
    with corner(stack, s3, new_ledger_id) as c:
        async with watching(c.settings, temporal_client, identifier="active") as active:
            await until(lambda: active.stats.resyncs >= 1, 30, "the active watcher's resync")
            async with watching(c.settings, other, identifier="standby") as standby:
                await asyncio.sleep(3)
                assert active.leading.is_set() and not standby.leading.is_set()
                assert Lock(c.zk, c.settings.watch_election_path).contenders() == ["active", "standby"]
            assert standby.stats.elected == 0


async def _partition(
    c: Corner, proxy: TcpProxy, seconds: float, change: Any, watcher: Any
) -> list[tuple[str, int]]:
    """Cut the watcher off for ``seconds``, make ``change`` meanwhile, heal; the orphans it made."""
    proxy.cut()
    await asyncio.sleep(0.5)
    orphans: list[tuple[str, int]] = change()
    await asyncio.sleep(max(0.0, seconds - 0.5))
    proxy.heal()
    return orphans


async def test_a_partitioned_watcher_resyncs_from_what_it_knew(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    proxy = TcpProxy(stack.zookeeper).start()
    try:
        with corner(stack, s3, new_ledger_id) as c:
            settings = c.settings.with_overrides(zookeeper=f"{proxy.address}{c.chroot}")
            b = c.broker
            topic = "public/default/partitioned"
            ids = b.create_topic(topic, 8, offloaded=[4, 5], offload_failed=[4, 5])
            reader = TopicReader(settings)
            expected: list[tuple[str, int]] = []
            async with watching(settings, temporal_client) as watcher:
                await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
                await seen(watcher, c.zk, ml(topic))

                # Shorter than the session timeout: the session survives, the watches do not.
                def trim_and_replace(ledger: int, offloaded: int) -> list[tuple[str, int]]:
                    b.trim(topic, [ledger], bk_delete_fails=[ledger])
                    # An offload replaced: only a diff against what the watcher knew can find its objects.
                    b.replace_offload(topic, offloaded, cleanup_fails=True)
                    return [("LEDGER", ledger), ("OFFLOAD_LEDGER", offloaded)]

                expected += await _partition(c, proxy, 2.0, lambda: trim_and_replace(ids[0], ids[4]), watcher)
                # Within the session: caught up from the zxid before the drop, no resync.
                await until(lambda: watcher.stats.catch_ups >= 1, 30, "the catch-up after reconnecting")
                assert watcher.stats.elected == 1 and watcher.stats.resyncs == 1
                await seen(watcher, c.zk, ml(topic))

                # Longer than the session timeout: the session expires, the lock with it; the watcher
                # competes again, wins (it is alone) and resyncs from the snapshot it kept.
                timeout = settings.zookeeper_timeout_seconds
                expected += await _partition(
                    c, proxy, 3 * timeout, lambda: trim_and_replace(ids[1], ids[5]), watcher
                )
                await until(
                    lambda: watcher.stats.elected >= 2 and watcher.stats.resyncs >= 2, 60, "re-election"
                )
                await seen(watcher, c.zk, ml(topic))
                # And it watches again.
                b.trim(topic, [ids[2]], bk_delete_fails=[ids[2]])
                expected.append(("LEDGER", ids[2]))
                await seen(watcher, c.zk, ml(topic))
                keys = await read_requests(reader, len(expected), DELAY + 2 * SLACK)
            reader.close()
            # Each orphan once at least: one still there at a later resync (the re-election's here) is
            # requested again, its earlier suspect having closed (ALLOW_DUPLICATE; the service dedupes).
            assert sorted(set(keys)) == sorted(expected), watcher.stats
    finally:
        proxy.stop()
