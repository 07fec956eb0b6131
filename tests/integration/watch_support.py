"""What the watcher tests share: a private corner of ZooKeeper, settings, the watcher in-process, the deletion
topic read back.

Each test gets its own chroot on the stack's ZooKeeper (``/watch-<id>``, with a formatted ledgers root and
Pulsar's roots), its own deletion topic and task queues: the watcher sees only what the test's simulated
broker writes, and its requests reach only the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
from kazoo.client import KazooClient
from temporalio.client import Client

from devstack.broker_sim import SimulatedBroker
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.zookeeper import kazoo_client
from ledger_deletion.formats.avro import decode_request
from ledger_deletion.formats.bk_paths import HIERARCHICAL_LAYOUT
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.watch.paths import classify
from ledger_deletion.watch.snapshot import Snapshot
from workers.watcher import Watcher, run_watcher

DELAY = 4.0  # the watcher's delay in these tests, seconds


@dataclass
class Corner:
    """A chroot of the stack's ZooKeeper with a simulated cluster and broker writing into it."""

    chroot: str
    zk: KazooClient  # chrooted
    cluster: SimulatedCluster
    broker: SimulatedBroker
    settings: Settings


def format_chroot(root_zk: KazooClient, chroot: str) -> None:
    root_zk.create(f"{chroot}/ledgers/LAYOUT", HIERARCHICAL_LAYOUT, makepath=True)
    for path in ("ledgers/idgen", "managed-ledgers", "schemas"):
        root_zk.ensure_path(f"{chroot}/{path}")


@contextlib.contextmanager
def corner(
    stack: StackEndpoints,
    s3: Any,
    allocate: Callable[[], int],
    zookeeper: str | None = None,
    **overrides: Any,
) -> Iterator[Corner]:
    """A fresh chroot on ``zookeeper`` (default: the stack's) and settings for a watcher confined to it.

    ``allocate()``: a ledger id no other test uses (ledger ids key the suspects' workflows, and every test
    shares the stack's Temporal namespace).
    """
    hosts = zookeeper or stack.zookeeper
    run = uuid.uuid4().hex[:8]
    chroot = f"/watch-{run}"
    root_zk = kazoo_client(hosts, 10.0)
    root_zk.start(timeout=10)
    format_chroot(root_zk, chroot)
    zk = kazoo_client(f"{hosts}{chroot}", 10.0)
    zk.start(timeout=10)
    settings = stack.settings(
        zookeeper=f"{hosts}{chroot}",
        topic=f"persistent://pulsar/system/__ledger_deletion_watch_{run}",
        task_queue_prefix=f"ld-watch-{run}",
        watch_delay_seconds=DELAY,
        zookeeper_timeout_seconds=4.0,
        activity_timeout_seconds=20,
    ).with_overrides(**overrides)
    cluster = SimulatedCluster(zk, s3, bucket=settings.offload_bucket)
    try:
        broker = SimulatedBroker(cluster, lambda n: [allocate() for _ in range(n)])
        yield Corner(chroot, zk, cluster, broker, settings)
    finally:
        cluster.cleanup()
        zk.stop()
        zk.close()
        with contextlib.suppress(Exception):
            root_zk.delete(chroot, recursive=True)
        root_zk.stop()
        root_zk.close()


@contextlib.asynccontextmanager
async def watching(
    settings: Settings, client: Client, identifier: str | None = None
) -> AsyncIterator[Watcher]:
    """A watcher process's work, in this process, until the block ends."""
    stop = asyncio.Event()
    started: asyncio.Future[Watcher] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_watcher(settings, client, stop, started=started, identifier=identifier))
    done, _ = await asyncio.wait([started, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    try:
        yield started.result()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)


async def until(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout:.0f} s")
        await asyncio.sleep(0.1)


def _record(snapshot: Snapshot, path: str) -> object:
    """What ``snapshot`` knows of the record at ``path`` (None: nothing)."""
    if classify(path) is None:
        raise ValueError(f"{path} is no record")
    return snapshot.known(path)


async def seen(watcher: Watcher, zk: KazooClient, *paths: str, timeout: float = 30.0) -> None:
    """Until the watcher knows each record at ``paths`` as ZooKeeper holds it now.

    A change the watcher has not read yet may be overtaken by the next one to the same record, and a
    ledger listed and dropped between two reads is one it never sees (a broker lists a ledger for minutes at
    least; a test making changes back to back must give it the time to read them).
    """

    def current(path: str) -> object:
        probe = Snapshot()
        found = zk.exists(path)
        if found is not None:
            probe.load(path, zk.get(path)[0])
        return _record(probe, path)

    wanted = {path: current(path) for path in paths}
    await until(
        lambda: all(_record(watcher.snapshot, p) == want for p, want in wanted.items()),
        timeout,
        f"the watcher reading {', '.join(paths)}",
    )


@dataclass(frozen=True)
class Arrived:
    request: PendingDeleteLedgerInfo
    publish_time: float  # seconds since the epoch

    @property
    def key(self) -> tuple[str, int]:
        return self.request.ledger_type.value, self.request.ledger_id


class TopicReader:
    """Everything published on the test's deletion topic, read from the start."""

    def __init__(self, settings: Settings) -> None:
        self._client = pulsar.Client(settings.pulsar_url)
        self._consumer = self._client.subscribe(
            settings.topic,
            f"watch-test-{uuid.uuid4().hex[:6]}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        self.arrived: list[Arrived] = []

    def drain(self, seconds: float) -> list[Arrived]:
        """Read for ``seconds`` (blocking); returns everything read so far."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                message = self._consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            self.arrived.append(Arrived(decode_request(message.data()), message.publish_timestamp() / 1000))
            self._consumer.acknowledge(message)
        return self.arrived

    def keys(self) -> list[tuple[str, int]]:
        return sorted(a.key for a in self.arrived)

    def close(self) -> None:
        self._consumer.close()
        self._client.close()
