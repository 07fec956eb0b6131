"""The demo's last step: an orphan no request names, caught by the watcher and deleted, with no scan.

A simulated broker trims two ledgers of a topic and BookKeeper's delete of one of them fails: an orphan that,
without PIP-186 in Pulsar, nothing asks to delete. The watcher (``workers.watcher``, in this process) sees
the trim in ZooKeeper, waits out its delay, finds that ledger still in BookKeeper and publishes a request
tagged as its own; the service's pools decide it and delete it. The other ledger, which the broker did
delete, is checked and not requested.

The step runs on a cluster of its own: a chroot of the stack's ZooKeeper holding Pulsar's metadata and
BookKeeper's ledgers, two emulated admin brokers reading it, its own deletion topic and task queues, and
pools and a watcher configured for it as a deployment beside that cluster would be. A watcher takes in its
whole metadata store: on the stack's root, where every test session leaves orphans, its first resync would
request them all. Ledger ids are the caller's (the demo's are checked against Temporal,
``devstack.demo_state.fresh_ledger_ids``): they key workflows in the stack's one Temporal namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pulsar
from kazoo.client import KazooClient
from rich.console import Console
from temporalio.client import Client
from temporalio.service import RPCError

from devstack.broker_sim import SimulatedBroker
from devstack.cluster import SimulatedCluster
from devstack.demo_state import own_cluster
from devstack.stack import StackEndpoints
from ledger_deletion import connections
from ledger_deletion.contracts import DeletionResult, Outcome
from ledger_deletion.formats.avro import decode_request
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.watch.suspects import REASON_PROPERTY, SOURCE, SOURCE_PROPERTY, Reason, Suspect
from ledger_deletion.watch_contracts import SuspectOutcome, SuspectResult
from workers.pools import RunningPools, run_pools
from workers.watcher import Watcher, run_watcher
from workflows.reconcile import ReconcileWorkflow

__all__ = ["WATCH_DELAY_SECONDS", "run_watch_step"]

WATCH_DELAY_SECONDS = 3.0  # the watcher's delay here: long enough to see, short enough for a demo
TIMEOUT_SECONDS = 60.0  # for each thing the step waits for
T = TypeVar("T")


@dataclass
class _Corner:
    """The step's cluster: a chroot of the stack's ZooKeeper, its admin brokers, and settings for it."""

    zk: KazooClient  # chrooted
    broker: SimulatedBroker
    settings: Settings


@contextlib.contextmanager
def _corner(
    endpoints: StackEndpoints, base: Settings, allocate: Callable[[int], list[int]]
) -> Iterator[_Corner]:
    run = uuid.uuid4().hex[:8]
    with own_cluster(endpoints, base, "demo-watch") as own:
        settings = own.settings.with_overrides(
            topic=f"persistent://pulsar/system/__ledger_deletion_demo_{run}",
            task_queue_prefix=f"ld-demo-watch-{run}",
            watch_delay_seconds=WATCH_DELAY_SECONDS,
            reconcile_schedule="",  # no scan of any kind: what is deleted, the watcher asked for
        )
        cluster = SimulatedCluster(own.zk, endpoints.s3_client(), bucket=settings.offload_bucket)
        yield _Corner(own.zk, SimulatedBroker(cluster, allocate), settings)


class _RequestReader:
    """The step's deletion topic read from its start, beside the pools' subscription."""

    def __init__(self, settings: Settings) -> None:
        self._client = connections.pulsar_client(settings)
        self._reader = self._client.create_reader(settings.topic, pulsar.MessageId.earliest)
        self.read: list[tuple[PendingDeleteLedgerInfo, float]] = []  # each with its publish time (epoch s)

    def drain(self, until: Callable[[], bool], timeout: float) -> list[tuple[PendingDeleteLedgerInfo, float]]:
        """Read until ``until()`` holds after a read, or ``timeout`` seconds passed. Blocking."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self._reader.read_next(timeout_millis=200)
            except pulsar.Timeout:
                if until():
                    break
                continue
            self.read.append((decode_request(message.data()), message.publish_timestamp() / 1000))
            if until():
                break
        return self.read

    def close(self) -> None:
        self._reader.close()
        self._client.close()


class _Facts:
    """The step's output: one line per fact, each marked as it should be or not."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self.ok = True

    def add(self, ok: bool, text: str) -> None:
        self.ok = self.ok and ok
        self._console.print(f"{'[green]✓[/green]' if ok else '[red]✗[/red]'} {text}")


async def run_watch_step(
    console: Console,
    client: Client,
    endpoints: StackEndpoints,
    base: Settings,
    namespace: str,
    allocate: Callable[[int], list[int]],
) -> bool:
    """Print one line per fact; True when each is as it should be."""
    facts = _Facts(console)
    with _corner(endpoints, base, allocate) as corner:
        topic = f"{namespace}/orders"
        ledgers = await asyncio.to_thread(corner.broker.create_topic, topic, 3)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        pools_started: asyncio.Future[RunningPools] = loop.create_future()
        watcher_started: asyncio.Future[Watcher] = loop.create_future()
        settings = corner.settings
        reader = await asyncio.to_thread(_RequestReader, settings)
        tasks = [
            asyncio.create_task(run_pools(["all"], settings, stop, client=client, started=pools_started)),
            asyncio.create_task(
                run_watcher(settings, client, stop, started=watcher_started, identifier="demo")
            ),
        ]
        try:
            running = await _started(pools_started, tasks)
            watcher = await _started(watcher_started, tasks)
            await _until(lambda: watcher.stats.resyncs >= 1, "the watcher's first resync")
            facts.add(
                watcher.stats.leading,
                f"watcher elected on {settings.zookeeper} (delay {WATCH_DELAY_SECONDS:g} s), pools running",
            )
            await _show(facts, client, corner, topic, ledgers, reader)
            await _until(lambda: running.ingestor is None or not len(running.ingestor.pending), "the ack")
        except TimeoutError as exc:
            facts.add(False, str(exc))
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=TIMEOUT_SECONDS)
            await asyncio.to_thread(reader.close)
    return facts.ok


async def _show(
    facts: _Facts, client: Client, corner: _Corner, topic: str, ledgers: list[int], reader: _RequestReader
) -> None:
    """Trim two of the topic's three ledgers, the first one's BookKeeper delete failing; follow both."""
    settings, broker = corner.settings, corner.broker
    orphan, deleted, listed = ledgers
    trimmed_at = time.time()
    await asyncio.to_thread(broker.trim, topic, [orphan, deleted], bk_delete_fails=[orphan])
    facts.add(
        broker.stored_ledgers(topic) == [listed],
        f"broker trimmed {orphan}, {deleted} from {topic}; BookKeeper delete of {orphan} failed",
    )

    read = await asyncio.to_thread(reader.drain, lambda: bool(reader.read), TIMEOUT_SECONDS)
    if not read:
        raise TimeoutError(f"no request for ledger {orphan} within {TIMEOUT_SECONDS:.0f} s")
    request, published = read[0]
    tags = ", ".join(f"{key}={request.properties.get(key)}" for key in (SOURCE_PROPERTY, REASON_PROPERTY))
    late = published - trimmed_at
    facts.add(
        request.ledger_id == orphan
        and request.properties.get(SOURCE_PROPERTY) == SOURCE
        and request.check_ledger_still_in_use,
        f"watcher's request for {request.ledger_id}, {late:.1f} s after the trim: {tags}",
    )

    gone_id = Suspect(dataclasses.replace(request, ledger_id=deleted), Reason.TRIMMED).workflow_id
    gone = await _result(client, gone_id, SuspectResult)
    await asyncio.to_thread(reader.drain, lambda: False, 1.0)  # a request too many would show by now
    facts.add(
        gone.outcome is SuspectOutcome.GONE and len(reader.read) == 1,
        f"{deleted}, deleted by the broker: suspect {gone.outcome}, {len(reader.read) - 1} requests",
    )

    result = await _result(client, request.workflow_id, DeletionResult)
    facts.add(
        result.outcome is Outcome.DELETED, f"service's workflow {request.workflow_id}: {result.outcome}"
    )

    path = ledger_path(orphan, settings.bk_ledgers_root)
    orphan_gone = await asyncio.to_thread(corner.zk.exists, path) is None
    listed_path = ledger_path(listed, settings.bk_ledgers_root)
    listed_kept = await asyncio.to_thread(corner.zk.exists, listed_path) is not None
    facts.add(
        orphan_gone and listed_kept,
        f"znode {path} {'gone' if orphan_gone else 'still there'}; {listed} (listed) "
        f"{'kept' if listed_kept else 'gone'}",
    )

    reconciles = await client.count_workflows(
        f"WorkflowType = '{ReconcileWorkflow.__name__}' AND TaskQueue = '{settings.watch_task_queue}'"
    )
    facts.add(reconciles.count == 0, f"reconcile runs: {reconciles.count} (none scheduled)")


async def _started(future: asyncio.Future[T], tasks: list[asyncio.Task[None]]) -> T:
    """``future``'s result, or the exception of a task that ended before setting it."""
    waiting: list[asyncio.Future[Any]] = [future, *tasks]
    done, _ = await asyncio.wait(waiting, timeout=TIMEOUT_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task in done:
            task.result()
    if not future.done():
        raise TimeoutError(f"not started within {TIMEOUT_SECONDS:.0f} s")
    return future.result()


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {TIMEOUT_SECONDS:.0f} s")
        await asyncio.sleep(0.1)


async def _result(client: Client, workflow_id: str, result_type: type[T]) -> T:
    """The workflow's result, waiting for it to start (a suspect's after its delay, a request's once
    ingested)."""

    async def wait() -> T:
        while True:
            try:
                result: T = await client.get_workflow_handle(workflow_id, result_type=result_type).result()
                return result
            except RPCError:  # not started yet
                await asyncio.sleep(0.3)

    return await asyncio.wait_for(wait(), timeout=TIMEOUT_SECONDS)
