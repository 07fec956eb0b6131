"""Running worker pools: build each pool's clients, activities and Temporal workers, run until stopped.

One process may run several pools (``--pool all`` for one machine) or exactly one (production: one
deployment per pool, scaled on its own task queue's backlog).

Which process holds which rights: the workflow pool runs the workflow and, as local activities, its
read-only checks, so it holds read clients only (the admin REST client, a :class:`LedgerReader` and
Pulsar's metadata store), logged in to ZooKeeper as the reading identity. The bookkeeper pool holds the one
client that can delete a ledger's metadata (:class:`LedgerStore`), logged in as the deleting identity, the
offload pool the S3 client, the pulsar pool the consumer, the dead-letter producer and the acks. Each
deployment gives its process only its own credentials (docs/security.md).

What a deleting pool may do: each delete asks the kill switch first (``ledger_deletion.kill_switch``, read
here in the background); Temporal's task-queue rate limit caps the deletes per second across every process
of the pool (``bk_deletes_per_second``, ``offload_deletes_per_second``). A process in shadow mode registers
no delete at all: its bookkeeper pool has nothing to run, its offload pool only inspects.

Shutdown order matters for "nothing lost": first stop receiving, then let workers finish what they hold
(the ack worker keeps acking during the grace period), then close the Pulsar consumer. Whatever is still
unacked at that point is redelivered by Pulsar to another consumer and joins its ledger's workflow again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import PollerBehaviorSimpleMaximum, UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.bookkeeper import BookKeeperDeleteActivities, BookKeeperReadActivities
from activities.messaging import MessagingActivities
from activities.offload import OffloadActivities
from activities.pulsar_admin import PulsarAdminActivities
from ledger_deletion import connections, kill_switch, tripwire
from ledger_deletion.adapters import messaging
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.adapters.zookeeper import LedgerReader, LedgerStore, PulsarMetadataStore
from ledger_deletion.audit.store import AuditStore
from ledger_deletion.audit.writer import AuditWriter
from ledger_deletion.contracts import Mode
from ledger_deletion.errors import ConfigurationError, MetadataStoreUnavailable
from ledger_deletion.observability import metrics, readiness, redaction
from ledger_deletion.ops import inflight
from ledger_deletion.policy import deletion_policy, describe_policy
from ledger_deletion.settings import POOLS, Settings
from ledger_deletion.temporal_client import connect_temporal
from workers.ingest import Ingestor
from workers.topics import keep_live_subscription, subscribe_all
from workflows.ledger_deletion import LedgerDeletionWorkflow

log = logging.getLogger(__name__)


def instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class RunningPools:
    """What a running process exposes to tests and the demo."""

    pools: frozenset[str]
    ack_queue: str = ""
    ingestor: Ingestor | None = None
    workers: list[Worker] = field(default_factory=list)
    kill_switch: kill_switch.Watch | None = None  # in a process running a deleting pool in live mode
    audit: AuditWriter | None = None  # in a process running the pulsar pool with an audit bucket


def _threaded(concurrency: int, name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=name)


def admin_client(settings: Settings, threads: int) -> PulsarAdminClient:
    """The admin REST client, one kept-alive connection per thread that calls it."""
    return connections.admin_client(settings, threads)


def object_store(settings: Settings, threads: int) -> ObjectStore:
    """The S3 client, one pooled connection per thread that calls it."""
    return ObjectStore(settings.s3_endpoint or None, settings.s3_region, max_connections=threads)


def audit_writer(settings: Settings, identity: str) -> AuditWriter | None:
    """The pulsar pool's audit writer, started; None (and a warning) without an audit bucket."""
    if not settings.audit_bucket:
        log.warning("LEDGER_DELETION_AUDIT_BUCKET is empty: decisions are acked without an audit record")
        return None
    return AuditWriter(
        AuditStore.from_settings(settings), identity, linger_seconds=settings.audit_linger_seconds
    ).start()


def workflow_runner(settings: Settings) -> WorkflowRunner:
    """The SDK's sandbox when ``workflow_sandbox`` is set, plain worker threads otherwise (the default)."""
    if not settings.workflow_sandbox:
        return UnsandboxedWorkflowRunner()
    # Our pure modules are safe to share across runs; re-importing them per run only costs CPU.
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("ledger_deletion", "workflows")
    )


async def run_pools(
    pools: Iterable[str],
    settings: Settings,
    stop: asyncio.Event,
    *,
    client: Client | None = None,
    started: asyncio.Future[RunningPools] | None = None,
) -> None:
    """Run the given pools until ``stop`` is set, then shut down cleanly."""
    wanted = _wanted(pools, settings)
    shadow = settings.mode is Mode.SHADOW
    # Before any client exists: kazoo and friends log credentials at DEBUG (idempotent).
    redaction.install(settings)
    temporal = client or await connect_temporal(settings)
    running = RunningPools(pools=wanted)
    hosted = _Queues(settings)
    async with AsyncExitStack() as stack:
        if not shadow and wanted & {"bookkeeper", "offload"}:
            deleting = "+".join(sorted(wanted & {"bookkeeper", "offload"}))
            running.kill_switch = await _kill_switch(temporal, settings, stop, stack, deleting)
        # The shared-BookKeeper tripwire: the checks decide by it, the deleting pools ask it again.
        view = (
            await _tripwire(temporal, settings, stop, stack)
            if "workflow" in wanted or (wanted & {"bookkeeper", "offload"} and not shadow)
            else None
        )
        # One builder per pool, in this order: it is the order of the workers (and of their queues).
        if "workflow" in wanted:
            await _workflow_pool(settings, hosted, stack, view)
        if "bookkeeper" in wanted:
            await _bookkeeper_pool(settings, hosted, stack, running.kill_switch, view)
        if "offload" in wanted:
            _offload_pool(settings, hosted, running.kill_switch, view)
        if "pulsar" in wanted:
            await _pulsar_pool(settings, hosted, stack, running, temporal, eager_start="workflow" in wanted)
        running.workers += [
            _worker(temporal, queue, what, settings, stack) for queue, what in hosted.queues.items()
        ]
        await _serve(running, temporal, settings, stop, stack, started)
    log.info("pools %s stopped", sorted(wanted))


def _wanted(pools: Iterable[str], settings: Settings) -> frozenset[str]:
    """The pools to run (``all``: every one), refused when the settings cannot serve them."""
    wanted = frozenset(POOLS if "all" in pools else pools)
    unknown = wanted - set(POOLS)
    if unknown:
        raise ValueError(f"unknown pool(s) {sorted(unknown)}; choose from {', '.join(POOLS)} or all")
    if settings.colocate_pools and wanted != frozenset(POOLS):
        # Every task of every pool lands on the one queue: a process lacking a pool would fail its tasks.
        raise ConfigurationError(
            "LEDGER_DELETION_COLOCATE_POOLS puts every pool on one task queue: run all pools in every "
            f"process (--pool all), not {', '.join(sorted(wanted))}"
        )
    if settings.colocate_pools and (settings.bk_deletes_per_second or settings.offload_deletes_per_second):
        # A task-queue rate limit counts every activity of the queue, and one queue would hold the acks and
        # dead letters too: a limit meant for deletes would slow every deletion's ack.
        raise ConfigurationError(
            "LEDGER_DELETION_BK_DELETES_PER_SECOND and _OFFLOAD_DELETES_PER_SECOND limit the deleting pools' "
            "own task queues; with LEDGER_DELETION_COLOCATE_POOLS there is one queue for every activity: "
            "run the pools apart to limit deletes"
        )
    return wanted


async def _workflow_pool(
    settings: Settings, hosted: _Queues, stack: AsyncExitStack, view: tripwire.View | None
) -> None:
    """The workflow, and its read-only checks as its local activities."""
    queue = hosted.on(settings.task_queue("workflow"))
    queue.workflows = True
    queue.checks = _read_only_checks(settings, stack, view)
    await _check_ledger_layout(queue.checks.ledgers)


async def _bookkeeper_pool(
    settings: Settings,
    hosted: _Queues,
    stack: AsyncExitStack,
    switch: kill_switch.Watch | None,
    view: tripwire.View | None,
) -> None:
    """The one activity that deletes a ledger's metadata; nothing in shadow mode."""
    if settings.mode is Mode.SHADOW:
        log.info("shadow mode: the bookkeeper pool has nothing to run (a shadow run deletes no ledger)")
        return
    # The one client that can delete, logged in as the identity that may (docs/security.md).
    store = LedgerStore(
        settings.zookeeper,
        settings.bk_ledgers_root,
        settings.zookeeper_timeout_seconds,
        connections.zookeeper_digest(settings, deletes=True),
        connections.zookeeper_security(settings, deletes=True),
    )
    stack.callback(store.close)
    await _check_ledger_layout(store)
    assert switch is not None  # read in live mode by every process running a deleting pool
    deletes = BookKeeperDeleteActivities(store, switch.check, view)
    hosted.add("bookkeeper", [deletes.delete_bk_ledger], settings.bookkeeper_concurrency)
    hosted.on(settings.task_queue("bookkeeper")).rate = settings.bk_deletes_per_second


def _offload_pool(
    settings: Settings, hosted: _Queues, switch: kill_switch.Watch | None, view: tripwire.View | None
) -> None:
    """The offloaded objects' delete (live mode) and inspection (both modes)."""
    offload = OffloadActivities(
        object_store(settings, settings.offload_concurrency),
        settings.offload_bucket,
        settings.s3_endpoint_alias_list,
        may_delete=switch.check if switch is not None else _shadow_deletes_nothing,
        tripwire=view,
    )
    # A live process inspects too: it runs a request outside its live allow-list in shadow.
    inspect = [offload.inspect_offload_segment]
    offloads = inspect if settings.mode is Mode.SHADOW else [offload.delete_offload_segment, *inspect]
    hosted.add("offload", offloads, settings.offload_concurrency)
    hosted.on(settings.task_queue("offload")).rate = settings.offload_deletes_per_second


async def _pulsar_pool(
    settings: Settings,
    hosted: _Queues,
    stack: AsyncExitStack,
    running: RunningPools,
    temporal: Client,
    *,
    eager_start: bool,
) -> None:
    """The consumer and its ingest loop, the dead letters, the acks (on this process's own queue), the audit
    writer; sets ``running``'s ingestor, ack queue and audit writer."""
    shadow = settings.mode is Mode.SHADOW
    pulsar_client = connections.pulsar_client(settings)
    stack.callback(pulsar_client.close)
    dead_letters = messaging.Publisher(
        pulsar_client, settings.dead_letter_topic, kept_for=messaging.DEAD_LETTER_SUBSCRIPTION
    )
    stack.callback(dead_letters.close)
    pending = messaging.PendingAcks()
    identity = instance_id()
    running.audit = audit_writer(settings, identity)
    if running.audit is not None:
        stack.callback(running.audit.close)
    messaging_activities = MessagingActivities(pending, dead_letters, running.audit, identity)
    hosted.add("pulsar", [messaging_activities.publish_dead_letter], settings.pulsar_concurrency)
    running.ack_queue = f"{settings.task_queue('pulsar')}-ack-{identity}"
    # Every deletion ends with an ack here: as many slots as the pool has activity threads, or under a
    # backlog the acks queue for a slot behind the dead letters and hold their messages unacked.
    hosted.queues[running.ack_queue] = _Hosted(
        activities=[messaging_activities.ack_messages], concurrency=settings.pulsar_concurrency
    )
    # The system topic plus per-namespace deletion topics (tenant isolation), as one consumer.
    subscribe = functools.partial(
        subscribe_all, pulsar_client, settings, min(settings.ingest_max_inflight, 1000)
    )
    consumer = await asyncio.to_thread(subscribe)
    if shadow:
        # The live subscription must hold every request until a live deployment reads it.
        await asyncio.to_thread(keep_live_subscription, pulsar_client, settings)
    stack.callback(metrics.current().observe_pending_acks("pulsar", pending.__len__))
    policy = deletion_policy(settings)
    # What every workflow this process starts will do, so an operator can check it at a glance.
    log.info("new deletions: %s", describe_policy(policy))
    log.info(
        "mode %s: %s",
        settings.mode.value,
        "nothing is deleted"
        if shadow
        else f"deletes in {settings.live_scope.describe()}, shadow for the rest",
    )
    running.ingestor = Ingestor(
        temporal=temporal,
        consumer=consumer,
        pending=pending,
        dead_letters=dead_letters,
        policy=policy,
        workflow_queue=settings.task_queue("workflow"),
        ack_queue=running.ack_queue,
        system_topic=settings.topic,
        max_inflight=settings.ingest_max_inflight,
        resubscribe=subscribe,
        resubscribe_idle_seconds=settings.ingest_resubscribe_idle_seconds,
        eager_start=eager_start,
        mode=settings.mode,
        live_scope=settings.live_scope,
        audit=running.audit,
        worker=identity,
    )
    stack.callback(running.ingestor.close_consumer)


async def _serve(
    running: RunningPools,
    temporal: Client,
    settings: Settings,
    stop: asyncio.Event,
    stack: AsyncExitStack,
    started: asyncio.Future[RunningPools] | None,
) -> None:
    """Run the built workers (and the ingest loop, its sweeper and gauge) until ``stop`` is set or one of
    them ends, then shut them down in the order the module docstring gives."""
    worker_tasks = [asyncio.create_task(w.run()) for w in running.workers]
    ingest_stop = asyncio.Event()
    ingest_task: asyncio.Task[None] | None = None
    sweeper: asyncio.Task[None] | None = None
    inflight_gauge: asyncio.Task[None] | None = None
    if running.ingestor is not None:
        ingest_task = asyncio.create_task(running.ingestor.run(ingest_stop))
        sweeper = asyncio.create_task(running.ingestor.sweep_forever(stop, settings.ack_sweep_seconds))
        if settings.inflight_metric_seconds:
            inflight_gauge = asyncio.create_task(
                inflight.report_forever(temporal, settings, stop, settings.inflight_metric_seconds)
            )
    ready = readiness.current()
    checked = {"temporal": functools.partial(_temporal_serving, temporal)}
    if running.ingestor is not None:
        checked["pulsar"] = functools.partial(_consumer_connected, running.ingestor)
    for name, check in checked.items():
        ready.add(name, check)
        stack.callback(ready.discard, name)
    ready_stop = asyncio.Event()  # not ``stop``: the pools also end when a worker fails
    ready_task = asyncio.create_task(ready.run(ready_stop))
    log.info("pools %s running (ack queue %s)", sorted(running.pools), running.ack_queue or "-")
    if started is not None and not started.done():
        started.set_result(running)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait(
        [stopped, *worker_tasks, *([ingest_task] if ingest_task else [])],
        return_when=asyncio.FIRST_COMPLETED,
    )
    # 1. stop receiving; 2. give in-flight workflows time to ack through us; 3. stop the workers.
    ingest_stop.set()
    if ingest_task is not None and running.ingestor is not None:
        await ingest_task
        log.info("ingest stopped: %s", running.ingestor.stats)
        if settings.shutdown_grace_seconds and len(running.ingestor.pending):
            await _drain(running.ingestor, settings.shutdown_grace_seconds)
    if sweeper is not None:
        await sweeper
    if inflight_gauge is not None:
        await inflight_gauge
    ready_stop.set()
    await ready_task
    await asyncio.gather(*(w.shutdown() for w in running.workers), return_exceptions=True)
    for task in worker_tasks:
        if task.done() and not task.cancelled() and task.exception():
            log.error("worker failed: %s", task.exception())


async def _temporal_serving(client: Client) -> str:
    """Readiness: does the Temporal frontend answer its gRPC health check? (Every pool polls through it.)"""
    return "" if await client.service_client.check_health() else "Temporal's frontend reports NOT_SERVING"


async def _consumer_connected(ingestor: Ingestor) -> str:
    """Readiness: is the pulsar pool's consumer (the current one: the ingest re-subscribes) on a broker?"""
    connected = await asyncio.to_thread(ingestor.consumer.is_connected)
    return "" if connected else "the deletion topics' consumer is not connected to a broker"


def _read_only_checks(
    settings: Settings, stack: AsyncExitStack, view: tripwire.View | None = None
) -> _Checks:
    """The workflow pool's read clients and the checks that use them, closed with ``stack``.

    Who else writes to this BookKeeper (``settings.shared_bookkeeper``): each other cluster's metadata store,
    read with the credentials of ours (one reading identity for every Pulsar metadata store), or with
    ``none`` the tripwire's ``view``."""
    threads = settings.check_concurrency
    admin = admin_client(settings, threads)
    stack.callback(admin.close)
    # Logged in as the reading identity: where ZooKeeper's ACLs grant it no delete, not even a bug here could.
    ledgers = LedgerReader(
        settings.zookeeper,
        settings.bk_ledgers_root,
        settings.zookeeper_timeout_seconds,
        connections.zookeeper_digest(settings),
        connections.zookeeper_security(settings),
    )
    stack.callback(ledgers.close)
    pulsar_metadata = PulsarMetadataStore(
        settings.pulsar_metadata_hosts,
        settings.zookeeper_timeout_seconds,
        connections.zookeeper_digest(settings, pulsar_metadata=True),
        connections.zookeeper_security(settings, pulsar_metadata=True),
    )
    stack.callback(pulsar_metadata.close)
    shared = settings.shared_bookkeeper
    others = [
        PulsarMetadataStore(
            hosts,
            settings.zookeeper_timeout_seconds,
            connections.zookeeper_digest(settings, pulsar_metadata=True),
            connections.zookeeper_security(settings, pulsar_metadata=True),
        )
        for hosts in shared.other_stores
    ]
    for other in others:
        stack.callback(other.close)
    topics = PulsarAdminActivities(admin)
    metadata = BookKeeperReadActivities(ledgers, pulsar_metadata, others, view if shared.alone else None)
    activities = [
        topics.check_topic,
        topics.ask_owner_broker,
        metadata.verify_bk_metadata,
        metadata.check_offload_superseded,
        metadata.check_offload_listed,
    ]
    return _Checks(ledgers, activities, threads)


async def _kill_switch(
    client: Client, settings: Settings, stop: asyncio.Event, stack: AsyncExitStack, pools: str
) -> kill_switch.Watch:
    """Read the kill switch before serving any delete, then every ``kill_switch_seconds`` until ``stop``."""
    watch = kill_switch.Watch(
        functools.partial(kill_switch.read, client, settings.kill_switch_id),
        settings.kill_switch_seconds,
        settings.kill_switch_stale_seconds,
    )
    try:
        await kill_switch.ensure(
            client, settings.kill_switch_id, f"the {pools} pool of {kill_switch.operator()}"
        )
        log.info(
            "kill switch %s: %s (read every %g s; deletes refused on a read started over %g s ago)",
            settings.kill_switch_id,
            (await watch.refresh()).describe(),
            settings.kill_switch_seconds,
            settings.kill_switch_stale_seconds,
        )
    except Exception as exc:  # Temporal not there yet: deletes wait (PauseStateUnknown) until it is read
        log.warning("kill switch %s unreadable at start: %s", settings.kill_switch_id, exc)
    refresher = asyncio.create_task(watch.run(stop))
    stack.push_async_callback(_finish, refresher)
    stack.callback(
        metrics.current().observe_kill_switch(pools, lambda: watch.paused, lambda: watch.age_seconds)
    )
    return watch


async def _tripwire(
    client: Client, settings: Settings, stop: asyncio.Event, stack: AsyncExitStack
) -> tripwire.View:
    """Read the shared-BookKeeper tripwire before serving any check or delete, then as often as the kill
    switch."""
    view = tripwire.View(
        client,
        tripwire.tripwire_id(settings.task_queue_prefix),
        f"ledger-deletion worker on {kill_switch.operator()}",
        settings.kill_switch_seconds,
        settings.kill_switch_stale_seconds,
    )
    try:
        log.info("shared BookKeeper: %s", (await view.refresh()).describe())
    except Exception as exc:  # Temporal not there yet: unknown namespaces wait until it is read
        log.warning("shared BookKeeper tripwire unreadable at start: %s", exc)
    refresher = asyncio.create_task(view.run(stop))
    stack.push_async_callback(_finish, refresher)

    def namespaces() -> tuple[str, ...] | None:
        state = view.state
        if state is None:
            return None
        return (state.namespaces or ("unknown",)) if state.tripped else ()

    stack.callback(metrics.current().observe_tripwire(namespaces))
    return view


async def _finish(task: asyncio.Task[None]) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _shadow_deletes_nothing() -> None:
    raise ConfigurationError("a process in shadow mode deletes nothing")


async def _check_ledger_layout(store: LedgerReader) -> None:
    """Refuse to start on a ledgers root that is not BookKeeper's, or was formatted with a ledger manager
    whose paths we do not use.

    ZooKeeper out of reach is no reason not to start (the activities retry until it is back, and check the
    root again when a ledger is not found): the check is then left to the next start, and said so.
    """
    try:
        manager = await asyncio.to_thread(store.check_layout)
    except MetadataStoreUnavailable as exc:
        log.warning("could not read BookKeeper's LAYOUT (%s): ledger manager not checked", exc)
        return
    log.info("BookKeeper ledger manager: %s", manager)


async def _drain(ingestor: Ingestor, grace_seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + grace_seconds
    while len(ingestor.pending) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)


@dataclass(frozen=True)
class _Checks:
    """The workflow's read-only checks, run as local activities by the worker that runs the workflow."""

    ledgers: LedgerReader
    activities: list[Any]
    concurrency: int


@dataclass
class _Queues:
    """What this process serves, by task queue, in the order the pools were built."""

    settings: Settings
    queues: dict[str, _Hosted] = field(default_factory=dict)

    def on(self, queue: str) -> _Hosted:
        return self.queues.setdefault(queue, _Hosted())

    def add(self, pool: str, activities: list[Any], concurrency: int) -> None:
        """``pool``'s activities on its queue (the one queue of every pool with ``colocate_pools``)."""
        hosted = self.on(self.settings.task_queue(pool))
        hosted.activities += activities
        hosted.concurrency += concurrency


@dataclass
class _Hosted:
    """What this process serves on one task queue (several pools share one with ``colocate_pools``)."""

    workflows: bool = False
    activities: list[Any] = field(default_factory=list)  # ordinary activities, polled on the queue
    concurrency: int = 0
    rate: float = 0.0  # activity tasks per second the server hands out on the queue, to every worker; 0: any
    checks: _Checks | None = None  # with ``workflows``: its local activities


def _worker(
    client: Client, task_queue: str, hosted: _Hosted, settings: Settings, stack: AsyncExitStack
) -> Worker:
    checks = hosted.checks.activities if hosted.checks else []
    threads = hosted.concurrency + (hosted.checks.concurrency if hosted.checks else 0)
    executor = None
    if threads:
        executor = _threaded(threads, task_queue)
        stack.callback(executor.shutdown, wait=False, cancel_futures=True)
    # Workflows and activities on one queue (colocated pools): the SDK asks the server to hand each
    # activity the workflow schedules straight back to this worker (eager activity execution). The checks
    # are registered as activities too, which is how the SDK finds a local activity; without ordinary
    # activities on the queue the worker does not poll for activity tasks at all.
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[LedgerDeletionWorkflow] if hosted.workflows else [],
        workflow_runner=workflow_runner(settings),
        max_concurrent_workflow_tasks=settings.workflow_concurrency if hosted.workflows else None,
        activities=[*hosted.activities, *checks],
        activity_executor=executor,
        max_concurrent_activities=hosted.concurrency or None,
        max_concurrent_local_activities=hosted.checks.concurrency if hosted.checks else None,
        # Enforced by the server for the queue as a whole, so across every process of the pool: the rate
        # the latest poll asked for wins, hence one setting for the whole deployment.
        max_task_queue_activities_per_second=hosted.rate or None,
        no_remote_activities=not hosted.activities,
        workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(settings.workflow_task_pollers),
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(settings.activity_task_pollers),
        graceful_shutdown_timeout=timedelta(seconds=10),
    )
