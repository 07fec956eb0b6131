"""``ledger-deletion watch``: catch new orphans as they happen, with no change to the brokers.

Every watcher process serves the suspect and reconcile workflows on the watch task queue (so a suspect's
check runs on whichever watcher is up); one of them at a time, elected through a kazoo ``Lock`` under
``LEDGER_DELETION_WATCH_ELECTION_PATH`` in Pulsar's metadata store, watches:

1. it adds persistent recursive watches on ``/managed-ledgers`` and ``/schemas`` (ZooKeeper 3.6+), so every
   change from then on is queued;
2. it lists BookKeeper's ledger ids, then reads every managed ledger, cursor and schema locator (a resync):
   what changed since its last read (none at a first start) and the unreferenced Pulsar ledgers BookKeeper
   still holds become suspects;
3. it follows the queued changes: each changed znode is read once (the changes of a round in batched
   multi-reads), diffed against what it knew, and each suspect starts a workflow that waits out the delay.

A connection that drops loses the watches. On reconnection within the same session (a ZooKeeper server
restarted, a rolling restart of the ensemble, a network blip shorter than the session timeout) the watcher
catches up instead of resyncing: it adds the watches again and has ZooKeeper fire an event for every record
it knows that changed since the last answer before the drop, and for every directory whose children changed
(``SetWatches`` with that zxid, :meth:`PersistentWatches.catch_up`); those records are read and diffed as in
step 3. A session that expires loses the lock too; the watcher then competes for it again and, winning,
resyncs (step 1 and 2 against the snapshot it kept), as at a start. Two watchers acting at once (a paused
process that has not yet noticed its session expired) only start the same suspects twice, which their
workflow ids dedupe while a run is open. Every ``LEDGER_DELETION_WATCH_RESYNC_SECONDS`` it resyncs again
(step 2 alone), so an orphan no diff shows (never listed, or whose earlier suspect ended) is requested within
the delay plus that.

The watcher deletes nothing: a suspect still there after the delay is published as a request, which the
deletion service decides like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import CancelledError as KazooCancelled
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.reconcile_job import ReconcileJobActivities
from activities.watch import SuspectActivities
from ledger_deletion import connections, tripwire
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.adapters.zk_reads import ZkReads
from ledger_deletion.adapters.zk_watch import EventKind, PersistentWatches, ReceivedBytes, WatchEvent
from ledger_deletion.adapters.zookeeper import LedgerReader, PulsarMetadataStore, kazoo_client
from ledger_deletion.contracts import RetrySpec
from ledger_deletion.errors import PulsarMetadataNotFound
from ledger_deletion.formats.bk_metadata import LedgerMetadata
from ledger_deletion.observability import logs, metrics, redaction
from ledger_deletion.request import LedgerComponent
from ledger_deletion.settings import Settings
from ledger_deletion.shared_bookkeeper import namespace_of
from ledger_deletion.submit import RequestPublisher
from ledger_deletion.temporal_client import connect_temporal
from ledger_deletion.watch.paths import MANAGED_LEDGERS_ROOT, ROOTS, classify
from ledger_deletion.watch.resync import pulsar_tagged, unreferenced, unreferenced_suspects
from ledger_deletion.watch.snapshot import Snapshot
from ledger_deletion.watch.suspects import Suspect
from ledger_deletion.watch_contracts import SuspectInput, SuspectPolicy
from workers.pools import workflow_runner
from workers.reconcile_schedule import ensure_reconcile_schedule
from workers.watch_scan import (
    list_bk_ledger_ids,
    read_bk_metadata,
    read_new_children,
    read_records,
    sync_pulsar_metadata,
)
from workflows.reconcile import ReconcileWorkflow
from workflows.suspect import LedgerSuspectWorkflow

log = logging.getLogger(__name__)

MAX_ROUND = 2000  # changed znodes read in one round (one or a few multi-reads)
_ZK_ERRORS = (KazooException, KazooTimeoutError)
_WAKE = None  # queued by a connection state change: the loop looks at the state again
_RETRY_SECONDS = 1.0


@dataclass
class WatchStats:
    """What this process's watcher has done (read by tests and the benchmark, logged every minute)."""

    leading: bool = False
    elected: int = 0  # times this process won the election
    resyncs: int = 0  # at start, after a session loss, and every LEDGER_DELETION_WATCH_RESYNC_SECONDS
    catch_ups: int = 0  # reconnections within the session, caught up without a resync
    resync_bytes: int = 0  # read from ZooKeeper by the last resync, start to end (every connection)
    catch_up_bytes: int = 0  # read by the catch-ups themselves (not the reads of what they reported)
    events: int = 0  # watch events received while leading
    rounds: int = 0
    znodes_read: int = 0  # by the watch itself, not by resyncs
    suspects: int = 0  # suspect workflows started (or found running: the server does not say which)
    rejected: int = 0  # suspects whose request the service would refuse (logged)
    unknown_namespace: int = 0  # resync suspects left out: a namespace no store knows (or tripwire tripped)

    def zk_requests(self, *reads: ZkReads) -> int:
        return sum(r.requests for r in reads)


class Watcher:
    """One process's candidacy and, while elected, the watch. ``run`` until ``stop`` is set."""

    def __init__(
        self,
        settings: Settings,
        temporal: Client,
        metadata_zk: KazooClient,
        bk_zk: KazooClient,
        identifier: str | None = None,
        *,
        others: Sequence[KazooClient] = (),
        tripwire_id: str | None = None,
    ) -> None:
        """``others``: sessions on the metadata stores of the other Pulsar clusters sharing this BookKeeper
        (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH); ``tripwire_id``: with ``none``, the shared-BookKeeper
        tripwire's schedule (:mod:`ledger_deletion.tripwire`). Neither: no namespace check (the benchmark)."""
        self.settings = settings
        self.identifier = identifier or f"{socket.gethostname()}-{os.getpid()}"
        self.stats = WatchStats()
        self.snapshot = Snapshot()
        self.leading = asyncio.Event()
        self._temporal = temporal
        self._zk = metadata_zk
        self.reads = ZkReads(metadata_zk)
        self.bk_reads = ZkReads(bk_zk)
        self.other_reads = [ZkReads(zk) for zk in others]
        self.other_snapshots = [Snapshot() for _ in others]
        self._tripwire_id = tripwire_id
        self._unknown_logged: set[str] = set()
        self._queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watches = PersistentWatches(metadata_zk, self._on_event)
        # Each connection counted once: a caller may pass one client for both stores (the benchmark).
        clients = {id(zk): zk for zk in (bk_zk, *others) if zk is not metadata_zk}
        self._received = [ReceivedBytes(zk) for zk in clients.values()]
        self._interrupted = True  # a resync or a catch-up is due: at the start, and after every reconnection
        self._session_lost = False
        # The snapshot was read whole and is followed: a reconnection within the session can catch up.
        self._synced = False
        # The zxid of the last answer before a drop, while a catch-up from it is due (None: none is).
        self._catch_up_from: int | None = None
        self._children_due: set[str] = set()  # directories whose children changed while disconnected
        self._retry: dict[str, EventKind] = {}  # a round's changes whose reads failed, read again next
        self._resync_due: float | None = None  # monotonic time of the next periodic resync
        self._policy = SuspectPolicy(
            delay_seconds=settings.watch_delay_seconds,
            retry=RetrySpec(max_attempts=0, initial_seconds=1.0, max_interval_seconds=300.0),
            activity_timeout_seconds=settings.activity_timeout_seconds,
        )
        self._starts = asyncio.Semaphore(settings.watch_concurrency)

    # --- connection state and events (called on kazoo's threads) -------------------------------------------

    def _on_event(self, event: WatchEvent) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def _on_state(self, state: str) -> bool:
        if state == KazooState.LOST:
            self._session_lost = True
            self._catch_up_from = None  # a new session: kazoo starts its zxid over, the watcher resyncs
        elif state == KazooState.SUSPENDED and self._synced and self._catch_up_from is None:
            # Every change up to the last answer's zxid was sent as an event before that answer (the server
            # queues a change's events before any later answer, on one connection): what the persistent
            # watch missed is above it. Kept through further drops until a catch-up succeeds.
            self._catch_up_from = self._zk.last_zxid
        if state != KazooState.CONNECTED:
            self._interrupted = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, _WAKE)
        return False  # stay registered

    # --- election ----------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._zk.add_listener(self._on_state)
        reporter = asyncio.create_task(self._report(stop))
        try:
            while not stop.is_set():
                lock = Lock(self._zk, self.settings.watch_election_path, self.identifier)
                self._session_lost = False
                if not await self._acquire(lock, stop):
                    continue
                try:
                    self.stats.elected += 1
                    await self._lead(stop)
                finally:
                    await asyncio.to_thread(_release, lock)
        finally:
            self._zk.remove_listener(self._on_state)
            reporter.cancel()

    async def _acquire(self, lock: Lock, stop: asyncio.Event) -> bool:
        """Block until this process holds the lock (True) or ``stop`` is set (False)."""
        acquiring = asyncio.create_task(asyncio.to_thread(lock.acquire))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([acquiring, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not acquiring.done():
            lock.cancel()
        try:
            acquired = bool(await acquiring)
        except KazooCancelled:
            return False
        except _ZK_ERRORS as exc:
            log.warning("election: %s; trying again", _describe(exc))
            await asyncio.sleep(_RETRY_SECONDS)
            return False
        if acquired and stop.is_set():
            await asyncio.to_thread(_release, lock)
            return False
        return acquired

    # --- leading -----------------------------------------------------------------------------------------

    async def _lead(self, stop: asyncio.Event) -> None:
        log.info("watcher %s elected: watching %s", self.identifier, ", ".join(ROOTS))
        self.stats.leading = True
        self.leading.set()
        self._interrupted = True
        self._synced, self._catch_up_from = False, None  # won anew: resync
        try:
            while not stop.is_set() and not self._session_lost:
                if self._interrupted:
                    if self._zk.state != KazooState.CONNECTED:
                        await self._wait(_RETRY_SECONDS)
                        continue
                    self._interrupted = False  # before the watches are added: a drop during the resync counts
                    try:
                        if self._catch_up_from is not None and self._synced:
                            await self._catch_up(self._catch_up_from)
                        else:
                            await self._resync()
                    except _ZK_ERRORS as exc:
                        log.warning("resync interrupted: %s; again once connected", _describe(exc))
                        self._interrupted = True
                        await asyncio.sleep(_RETRY_SECONDS)
                    continue
                if self._resync_due is not None and time.monotonic() >= self._resync_due:
                    try:
                        await self._resync(watch=False)  # the watches stand: only the read and the diff
                    except _ZK_ERRORS as exc:
                        log.warning(
                            "periodic resync interrupted: %s; resyncing once connected", _describe(exc)
                        )
                        self._interrupted = True
                    continue
                changed = await self._next_round()
                if not changed and not self._children_due and not self._retry:
                    continue
                changed, self._retry = {**self._retry, **changed}, {}
                children, self._children_due = self._children_due, set()
                try:
                    suspects = await asyncio.to_thread(self._follow, changed, children)
                except _ZK_ERRORS as exc:
                    # Read again once connected: the catch-up reports only what changes after its zxid.
                    self._retry, self._children_due = changed, children | self._children_due
                    log.warning("watch interrupted: %s; catching up once connected", _describe(exc))
                    self._interrupted = True
                    continue
                await self._start(suspects)
        finally:
            self.stats.leading = False
            self.leading.clear()
            reason = "stopping" if stop.is_set() else "its ZooKeeper session expired"
            log.info("watcher %s no longer leading: %s", self.identifier, reason)

    async def _resync(self, *, watch: bool = True) -> None:
        """Watch again (``watch``), then diff a fresh read (and BookKeeper's unreferenced ledgers) with the
        snapshot.

        Raises:
            PulsarMetadataNotFound: Pulsar's metadata store has no ``/managed-ledgers`` while BookKeeper
                holds Pulsar's ledgers (a wrong store or chroot): every one would be a suspect.
        """
        began, received = time.monotonic(), self.zk_bytes_received
        if watch:
            self._synced, self._catch_up_from = False, None  # this read covers whatever a catch-up would
            for root in ROOTS:
                await asyncio.to_thread(self._watches.add, root)
        root = self.settings.bk_ledgers_root
        listed = await asyncio.to_thread(list_bk_ledger_ids, self.bk_reads, root)
        had_records = self.snapshot.records > 0
        store_found = await asyncio.to_thread(self.reads.exists, MANAGED_LEDGERS_ROOT)
        if not store_found and had_records:
            # Before the snapshot is touched: read in place, a missing store would empty it.
            raise PulsarMetadataNotFound(_no_store(self.settings, 0))
        # In place: each record is diffed into the snapshot as it is read, no second copy beside it.
        suspects = await asyncio.to_thread(sync_pulsar_metadata, self.reads, self.snapshot)
        # Listed in any cluster's store keeps a ledger: the tags name no cluster and every cluster sharing
        # this BookKeeper draws ids from its one generator (issue 39; PulsarClusterMetadataSetup
        # --existing-bk-metadata-service-uri). Their snapshots are kept too, and read in place.
        others = self.other_snapshots
        for reads, other in zip(self.other_reads, others, strict=True):
            await asyncio.to_thread(sync_pulsar_metadata, reads, other)
            other.rejected.clear()  # another cluster's changes are its own watcher's to request
        ids = await asyncio.to_thread(unreferenced, listed, self.snapshot, others)
        metadata = await asyncio.to_thread(read_bk_metadata, self.bk_reads, root, ids)
        if not store_found and (had_records or pulsar_tagged(metadata)):
            raise PulsarMetadataNotFound(_no_store(self.settings, pulsar_tagged(metadata)))
        known = {s.key for s in suspects}
        found = await asyncio.to_thread(unreferenced_suspects, metadata, self.snapshot, known, others)
        suspects += await self._known_namespaces(found, metadata)
        await self._start(suspects)
        self.stats.resyncs += 1  # done: its suspects' workflows started
        self.stats.resync_bytes = self.zk_bytes_received - received
        self._synced = self._synced or watch
        period = self.settings.watch_resync_seconds
        self._resync_due = time.monotonic() + period if period > 0 else None
        log.info(
            "resync: %d records, %d BookKeeper ledgers listed, %d unreferenced, %d suspects (%.1f s)",
            self.snapshot.records,
            len(listed),
            len(ids),
            len(suspects),
            time.monotonic() - began,
        )

    async def _catch_up(self, zxid: int) -> None:
        """After a reconnection within the session: watch again, and queue an event for every record and
        directory of the snapshot that changed since ``zxid``, which the next rounds read and diff.

        ZooKeeper compares a ``SetWatches``' one-shot watches with its zxid (``DataTree.setWatches``); it
        re-adds persistent ones without any comparison, which is why the catch-up names every path.
        """
        began = time.monotonic()
        before = self._watches.bytes_received
        records, directories = self.snapshot.watch_paths()
        requests = await asyncio.to_thread(self._watches.catch_up, zxid, records, directories)
        self._catch_up_from = None
        self.stats.catch_ups += 1
        self.stats.catch_up_bytes += self._watches.bytes_received - before
        log.info(
            "caught up from zxid %#x: %d SetWatches requests, %d bytes received (%.1f s)",
            zxid,
            requests,
            self._watches.bytes_received - before,
            time.monotonic() - began,
        )

    @property
    def zk_bytes_received(self) -> int:
        """Bytes read from every ZooKeeper connection of the watcher since the start (Pulsar's metadata
        store, BookKeeper's, the other clusters' stores)."""
        return self._watches.bytes_received + sum(r.count for r in self._received)

    async def _known_namespaces(
        self, suspects: list[Suspect], metadata: Mapping[int, LedgerMetadata]
    ) -> list[Suspect]:
        """The unreferenced suspects whose namespace a store knows (``/managed-ledgers/<namespace>``, as
        ``PulsarMetadataStore.knows_namespace``), and the others unless they must wait.

        With other stores declared, a namespace none knows may be a cluster nobody declared: left out. With
        ``none``, a recent ledger of an unknown namespace (``tripwire.is_evidence``) is another writer's:
        it trips the tripwire, and while it is tripped (or cannot be read) no unknown namespace's ledger is
        requested. One log line per namespace; counted in ``stats.unknown_namespace``.
        """
        if not self.other_reads and self._tripwire_id is None:
            return suspects
        groups: dict[str, list[Suspect]] = {}
        for one in suspects:
            request = one.request
            name = request.schema_id if request.ledger_component is LedgerComponent.SCHEMA_STORAGE else None
            groups.setdefault(namespace_of(name or request.managed_ledger_name) or "", []).append(one)
        out: list[Suspect] = []
        unknown: dict[str, list[Suspect]] = {}
        for namespace, group in groups.items():
            known = await asyncio.to_thread(self._knows, namespace) if namespace else False
            if known:
                out += group
            else:
                unknown[namespace] = group
        if not unknown:
            return out
        why = "known to none of the Pulsar metadata stores sharing this BookKeeper"
        if self._tripwire_id is not None:
            try:
                for namespace, group in unknown.items():
                    await self._trip_if_recent(self._tripwire_id, namespace, group, metadata)
                state = await tripwire.read(self._temporal, self._tripwire_id)
            except Exception as exc:  # Temporal out of reach: wait for the next resync, requesting none
                log.warning("shared BookKeeper tripwire unreadable: %s", _describe(exc))
                why = "not this cluster's, and the shared-BookKeeper tripwire could not be read"
            else:
                if not state.tripped:
                    return out + [one for group in unknown.values() for one in group]
                why = f"not this cluster's, and the shared-BookKeeper tripwire is {state.describe()}"
        for namespace, group in unknown.items():
            self.stats.unknown_namespace += len(group)
            metrics.current().watch_unknown_namespace(namespace or "unknown", len(group))
            if namespace not in self._unknown_logged:
                self._unknown_logged.add(namespace)
                log.warning("not requested: ledgers of namespace %s, %s", namespace or "(unnamed)", why)
        return out

    def _knows(self, namespace: str) -> bool:
        path = f"{MANAGED_LEDGERS_ROOT}/{namespace}"
        return any(reads.exists(path) for reads in (self.reads, *self.other_reads))

    async def _trip_if_recent(
        self, tripwire_id: str, namespace: str, group: list[Suspect], metadata: Mapping[int, LedgerMetadata]
    ) -> None:
        now = time.time()
        for one in group:
            md = metadata.get(one.request.ledger_id)
            if md is None:
                continue  # a diff's suspect: it was listed in our store, no evidence of another writer
            created = md.ctime if md.ctime is not None else now * 1000  # no ctime: taken as recent
            if tripwire.is_evidence(created, now):
                who = f"ledger-deletion watch {self.identifier}"
                seen = tripwire.Evidence(namespace, one.request.ledger_id, int(created), who)
                await tripwire.trip(self._temporal, tripwire_id, seen, who)
                return

    async def _next_round(self) -> dict[str, EventKind]:
        """The znodes changed since the last round, each with its last event (at most MAX_ROUND)."""
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout=_RETRY_SECONDS)
        except TimeoutError:
            return {}
        items = [first]
        while len(items) < MAX_ROUND and not self._queue.empty():
            items.append(self._queue.get_nowait())
        changed: dict[str, EventKind] = {}
        for item in items:
            if item is not None:
                self.stats.events += 1
                if item.kind is EventKind.CHILDREN:
                    self._children_due.add(item.path)
                else:
                    changed[item.path] = item.kind
        return changed

    def _follow(self, changed: dict[str, EventKind], children: set[str]) -> list[Suspect]:
        """Read each changed record once (a deleted one not at all) and diff it, and what is new in each of
        ``children`` (directories whose children changed while disconnected). On a worker thread."""
        suspects = read_new_children(self.reads, self.snapshot, sorted(children)) if children else []
        for path, kind in changed.items():
            if classify(path) is None and kind is not EventKind.CHANGED:
                self.snapshot.directory_event(path, kind is EventKind.CREATED)
        records = {path: kind for path, kind in changed.items() if classify(path) is not None}
        to_read = [path for path, kind in records.items() if kind is not EventKind.DELETED]
        found = read_records(self.reads, to_read)
        self.stats.rounds += 1
        self.stats.znodes_read += len(to_read)
        for path, kind in records.items():
            suspects += self.snapshot.apply(path, None if kind is EventKind.DELETED else found[path])
        return suspects

    async def _wait(self, seconds: float) -> None:
        """Until a connection state change or an event arrives, at most ``seconds``."""
        with contextlib.suppress(TimeoutError):
            item = await asyncio.wait_for(self._queue.get(), timeout=seconds)
            if item is not None:
                self._queue.put_nowait(item)  # an event for the round after the resync

    # --- starting suspects -------------------------------------------------------------------------------

    async def _start(self, suspects: Iterable[Suspect]) -> None:
        rejected, self.snapshot.rejected[:] = list(self.snapshot.rejected), []
        for reason in rejected:
            log.warning("not requested (the service would refuse the request): %s", reason)
        self.stats.rejected += len(rejected)
        await asyncio.gather(*(self._start_one(s) for s in suspects))

    async def _start_one(self, suspect: Suspect) -> None:
        request = suspect.request
        delay = _RETRY_SECONDS
        async with self._starts:
            while True:
                try:
                    # An open run of the same id is joined (USE_EXISTING): two watchers, or a diff and a
                    # resync, suspecting it at once wait once. A closed one is no reason to stay silent
                    # (ALLOW_DUPLICATE): a suspect can end REFERENCED and the ledger become an orphan later
                    # (a resync that read a lagging follower after a session loss, kazoo resetting its
                    # last_zxid, saw just-listed ledgers as gone; a shadow topic, ShadowManagedLedgerImpl,
                    # lists its source's ledgers under the same ids), and a request can end SKIPPED_IN_USE,
                    # which the broker never sends again.
                    await self._temporal.start_workflow(
                        LedgerSuspectWorkflow.run,
                        SuspectInput(request, self._policy),
                        id=suspect.workflow_id,
                        task_queue=self.settings.watch_task_queue,
                        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                        static_summary=f"{suspect.reason.value}: {request.summary()}"[:200],
                    )
                    self.stats.suspects += 1
                    log.debug("suspect %s (%s)", suspect.workflow_id, suspect.reason.value)
                    return
                except RPCError as exc:
                    log.warning("starting suspect %s: %s; retrying", suspect.workflow_id, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)

    async def _report(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=60)
            if self.stats.leading:
                log.info("watch: %s", self.stats)


def _no_store(settings: Settings, tagged: int) -> str:
    store = settings.pulsar_metadata_hosts
    if store == settings.zookeeper:  # the likeliest mistake: the setting left empty
        store += " (BookKeeper's, as when LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER is empty)"
    return (
        f"Pulsar's metadata store {store} has no {MANAGED_LEDGERS_ROOT} znode, but {tagged} unreferenced "
        "BookKeeper ledgers are tagged application=pulsar (or the records read before are gone): this is "
        "not the store Pulsar's brokers write to, and every ledger would be requested, so the watcher "
        "stops. Set LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER to Pulsar's metadataStoreUrl "
        "(host:port[,host:port][/chroot])."
    )


def _release(lock: Lock) -> None:
    with contextlib.suppress(*_ZK_ERRORS):
        lock.release()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --- the process ----------------------------------------------------------------------------------------


def _auth(digest: str | None) -> list[tuple[str, str]] | None:
    return [("digest", digest)] if digest else None


async def run_watcher(
    settings: Settings,
    temporal: Client,
    stop: asyncio.Event,
    *,
    started: asyncio.Future[Watcher] | None = None,
    identifier: str | None = None,
) -> None:
    """Serve the watch task queue and compete for the watch until ``stop`` is set."""
    redaction.install(settings)  # before any client logs: kazoo prints credentials at DEBUG
    async with AsyncExitStack() as stack:
        timeout = settings.zookeeper_timeout_seconds
        # Every ZooKeeper client here logs in as a reader: the watcher deletes nothing (its election's own
        # lock znodes aside, under LEDGER_DELETION_WATCH_ELECTION_PATH in Pulsar's metadata store).
        metadata_zk = kazoo_client(
            settings.pulsar_metadata_hosts,
            timeout,
            _auth(connections.zookeeper_digest(settings, pulsar_metadata=True)),
            connections.zookeeper_security(settings, pulsar_metadata=True),
        )
        bk_zk = kazoo_client(
            settings.zookeeper,
            timeout,
            _auth(connections.zookeeper_digest(settings)),
            connections.zookeeper_security(settings),
        )
        # Who else writes to this BookKeeper: raises ConfigurationError when the setting is unset (the CLI
        # refuses that before, WATCH_REQUIRES).
        shared = settings.shared_bookkeeper
        reader = (
            _auth(connections.zookeeper_digest(settings, pulsar_metadata=True)),
            connections.zookeeper_security(settings, pulsar_metadata=True),
        )
        other_zks = [kazoo_client(hosts, timeout, *reader) for hosts in shared.other_stores]
        for zk in (metadata_zk, bk_zk, *other_zks):
            await asyncio.to_thread(zk.start, timeout)
            stack.callback(zk.close)
            stack.callback(zk.stop)
        ledgers = LedgerReader(
            settings.zookeeper,
            settings.bk_ledgers_root,
            timeout,
            connections.zookeeper_digest(settings),
            connections.zookeeper_security(settings),
        )
        stack.callback(ledgers.close)
        pulsar_metadata = PulsarMetadataStore(
            settings.pulsar_metadata_hosts,
            timeout,
            connections.zookeeper_digest(settings, pulsar_metadata=True),
            connections.zookeeper_security(settings, pulsar_metadata=True),
        )
        stack.callback(pulsar_metadata.close)
        other_metadata = [
            PulsarMetadataStore(
                hosts,
                timeout,
                connections.zookeeper_digest(settings, pulsar_metadata=True),
                connections.zookeeper_security(settings, pulsar_metadata=True),
            )
            for hosts in shared.other_stores
        ]
        for other in other_metadata:
            stack.callback(other.close)
        publisher = RequestPublisher(settings)
        stack.callback(publisher.close)
        threads = settings.watch_concurrency + 1  # the scheduled reconcile holds one while its job runs
        objects = None
        if settings.s3_endpoint is not None:
            objects = ObjectStore(settings.s3_endpoint or None, settings.s3_region, max_connections=threads)
        else:
            log.warning("no LEDGER_DELETION_S3_ENDPOINT: offloaded suspects are requested without looking")
        suspects = SuspectActivities(
            ledgers,
            pulsar_metadata,
            publisher,
            objects,
            settings.offload_bucket,
            settings.s3_endpoint_alias_list,
            other_metadata,
        )
        reconcile = ReconcileJobActivities(os.environ)
        executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="watch")
        stack.callback(executor.shutdown, wait=False, cancel_futures=True)
        worker = Worker(
            temporal,
            task_queue=settings.watch_task_queue,
            workflows=[LedgerSuspectWorkflow, ReconcileWorkflow],
            activities=[suspects.check_suspect, suspects.publish_suspect, reconcile.run_reconcile],
            activity_executor=executor,
            max_concurrent_activities=threads,
            workflow_runner=workflow_runner(settings),
            graceful_shutdown_timeout=timedelta(seconds=10),
        )
        if settings.reconcile_schedule:
            await ensure_reconcile_schedule(temporal, settings)
        watcher = Watcher(
            settings,
            temporal,
            metadata_zk,
            bk_zk,
            identifier,
            others=other_zks,
            tripwire_id=tripwire.tripwire_id(settings.task_queue_prefix) if shared.alone else None,
        )
        worker_task = asyncio.create_task(worker.run())
        watch_task = asyncio.create_task(watcher.run(stop))
        if started is not None and not started.done():
            started.set_result(watcher)
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([stopping, worker_task, watch_task], return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        await asyncio.gather(watch_task, return_exceptions=True)
        await worker.shutdown()
        for task in (worker_task, watch_task):
            if task.done() and not task.cancelled() and task.exception():
                raise task.exception()  # type: ignore[misc]


async def serve(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if settings.metrics_port:  # Prometheus and the health checks of compose and Kubernetes probe it
        metrics.install(settings.metrics_port, settings.metrics_host)
    temporal = await connect_temporal(settings)
    await run_watcher(settings, temporal, stop)


def main(settings: Settings) -> None:
    logs.configure(settings)  # LEDGER_DELETION_LOG_LEVEL and _FORMAT; kazoo's chatter at WARNING
    asyncio.run(serve(settings))
