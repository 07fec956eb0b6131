"""``ledger-deletion soak``: a mixed workload under random faults, with the service's promises counted.

The soak runs its own embedded stack (other ports, other state dir: it kills services, so it must never
share a stack with tests or the demo), one worker process per pool, and an S3 fault proxy in front of moto.
Each round builds a small cluster (trims, late metadata updates, failed metadata updates, forged requests,
duplicates, garbage), publishes its requests while one random fault happens, waits until every workflow is
closed, and checks storage. Two faults are the brokers': a storm of the passing answers of a rolling
restart (412 "Failed to find ownership", 503, dropped connections), and owners whose memory lost ledgers
their store still lists (trims whose store write failed): those requests must be kept for replay, and the
round replays them from the dead-letter topic once the owner's next store write lands, when they must
delete. At the end it stops the pools and counts what is still unacked on the subscription. The last line
is::

    requests=N deleted=N kept_in_use=N kept_for_replay=N kept_mismatch=N dead_lettered=N unacked=N
    wrongly_deleted=N left_orphaned=N   (one line)

``wrongly_deleted``, ``left_orphaned`` and ``unacked`` must be 0. The workload pieces (:class:`Batch`,
:func:`build_batch`, :func:`settle`) are shared with ``tests/faults``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger_deletion.contracts import DeletionResult, Outcome
from ledger_deletion.errors import LedgerDeletionError
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client

    from devstack.broker_state import EmulatorControl
    from devstack.cluster import SimulatedCluster
    from devstack.faults import PoolSet, S3FaultProxy, ServiceControl
    from devstack.stack import StackEndpoints
    from ledger_deletion.submit import RequestPublisher

log = logging.getLogger(__name__)

DELETE_OUTCOMES = frozenset({Outcome.DELETED, Outcome.ALREADY_DELETED})
MISMATCH_OUTCOMES = frozenset({Outcome.SKIPPED_METADATA_MISMATCH, Outcome.SKIPPED_NOT_PULSAR})
IN_USE_OUTCOMES = frozenset({Outcome.SKIPPED_IN_USE})
REPLAY_OUTCOMES = frozenset({Outcome.DEAD_LETTERED})  # kept for replay: the broker will not send it again
# A ledger of the other Pulsar cluster on the shared BookKeeper: kept, however the request for it was decided
# (its namespace known to no store; listed by the other cluster's store, so kept like a store listing).
PEER_OUTCOMES = frozenset({Outcome.SKIPPED_UNKNOWN_NAMESPACE, Outcome.SKIPPED_IN_USE, Outcome.DEAD_LETTERED})
# Where the other cluster's metadata store is, in the same ZooKeeper: its own chroot.
PEER_ROOT = "/peer-cluster"


def peer_store(zookeeper: str, root: str = PEER_ROOT) -> str:
    """``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH`` for a peer cluster at ``root`` of ``zookeeper``."""
    return f"{zookeeper}{root}"


# --- workload -----------------------------------------------------------------------------------------------


@dataclass
class Expectation:
    """What must become of one request (one workflow id), and of the storage it names."""

    request: PendingDeleteLedgerInfo
    # "delete" | "in_use" | "replay" (kept, dead-lettered, deleted once replayed) | "mismatch" | "peer" (the
    # other cluster's ledger: kept)
    kind: str
    outcomes: frozenset[Outcome]
    ledgers: set[int] = field(default_factory=set)  # BK ledgers it must delete (delete) or keep (others)
    objects: list[tuple[str, str]] = field(default_factory=list)  # offloaded objects, likewise


@dataclass
class Batch:
    """One round of requests over a fresh namespace; built first, published and marked later."""

    cluster: SimulatedCluster
    namespace: str
    expectations: dict[str, Expectation] = field(default_factory=dict)  # by workflow id
    messages: list[PendingDeleteLedgerInfo] = field(default_factory=list)  # in publish order, with copies
    garbage: list[bytes] = field(default_factory=list)
    # Metadata updates of the mark phase: (delay after publishing in seconds, topic, ledger ids).
    marks: list[tuple[float, str, list[int]]] = field(default_factory=list)
    keep_ledgers: set[int] = field(default_factory=set)  # referenced ledgers nobody may delete
    keep_objects: list[tuple[str, str]] = field(default_factory=list)
    # Trims whose store write fails (topic, ledger ids): the owner drops the ledgers from memory, the store
    # keeps them (apply_divergences, through the admin emulator's test hook).
    divergences: list[tuple[str, list[int]]] = field(default_factory=list)

    @property
    def topics(self) -> list[str]:
        return sorted({e.request.topic_name for e in self.expectations.values()})

    def replay_kept_lost(self) -> int:
        """Ledgers and objects kept for replay that are gone before their replay (each a wrong deletion)."""
        kept = [e for e in self.expectations.values() if e.kind == "replay"]
        return sum(not self.cluster.ledger_exists(i) for e in kept for i in e.ledgers) + sum(
            not self.cluster.object_exists(k, b) for e in kept for b, k in e.objects
        )

    def apply_divergences(self, control: EmulatorControl) -> None:
        for topic, ids in self.divergences:
            control.fail_trim_store_write(topic, ids)

    @property
    def message_count(self) -> int:
        return len(self.messages) + len(self.garbage)

    def expect(self, exp: Expectation, copies: int = 1) -> None:
        self.expectations[exp.request.workflow_id] = exp
        self.messages.extend([exp.request] * copies)

    def storage_report(self) -> tuple[int, int, list[str]]:
        """(wrongly deleted, left orphaned, problems) for the storage this batch is responsible for."""
        wrong: list[str] = []
        left: list[str] = []
        must_go_ledgers = {i for e in self.expectations.values() if e.kind == "delete" for i in e.ledgers}
        must_go_objects = {o for e in self.expectations.values() if e.kind == "delete" for o in e.objects}
        keep_ledgers = self.keep_ledgers | {
            i for e in self.expectations.values() if e.kind != "delete" for i in e.ledgers
        }
        keep_objects = set(self.keep_objects) | {
            o for e in self.expectations.values() if e.kind != "delete" for o in e.objects
        }
        wrong += [
            f"ledger {i} was deleted" for i in sorted(keep_ledgers) if not self.cluster.ledger_exists(i)
        ]
        wrong += [
            f"s3://{b}/{k} was deleted"
            for b, k in sorted(keep_objects)
            if not self.cluster.object_exists(k, b)
        ]
        left += [f"ledger {i} still exists" for i in sorted(must_go_ledgers) if self.cluster.ledger_exists(i)]
        left += [
            f"s3://{b}/{k} still exists"
            for b, k in sorted(must_go_objects)
            if self.cluster.object_exists(k, b)
        ]
        return len(wrong), len(left), wrong + left


def build_batch(
    cluster: SimulatedCluster,
    namespace: str,
    rng: random.Random,
    units: int = 4,
    *,
    diverge: bool = False,
    peer: SimulatedCluster | None = None,
) -> Batch:
    """A mixed batch: every unit is a partitioned-looking topic with trims, races and forged requests.

    Per unit (ledger ids fresh from ZooKeeper's id generator):
    * 3 trimmed ledgers, one of them offloaded (a LEDGER and an OFFLOAD_LEDGER request), one requested twice;
    * 1 ledger requested before its metadata update, which lands 1 s later (in use, then free);
    * 1 ledger whose metadata update "fails" (requested, never removed: must be kept, SKIPPED_IN_USE);
    * with ``diverge``, 1 ledger (offloaded in the first unit) whose trim reached the owner's memory but
      whose store write failed (``Batch.divergences``): must be kept, dead-lettered for replay;
    * forged requests: another topic's live ledger, a cursor ledger claimed as data, a schema ledger of
      another schema, a ledger of another application (all must be kept);
    * one undecodable payload;
    * with ``peer``, a second Pulsar cluster on the same BookKeeper (its metadata store in a chroot of its
      own, declared in ``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH``): a geo-replicated topic of the unit's name
      with a ledger drawn before ours (below our newest) and its newest after ours, and a topic in a
      namespace only it has; a request for one ledger of each (the older one of the shared name), as a mark
      phase or a reconcile that did not know of it would send: all of its ledgers must be kept.
    """
    batch = Batch(cluster, namespace)
    other = f"{namespace}/other"
    other_ids = cluster.new_ledger_ids(2)
    cluster.create_topic(other, other_ids)
    batch.keep_ledgers |= set(other_ids)
    schema_a, schema_b = f"{namespace}/schema-a", f"{namespace}/schema-b"
    schema_ledgers = cluster.new_ledger_ids(2)
    cluster.add_schema(schema_a, [schema_ledgers[0]])
    cluster.add_schema(schema_b, [schema_ledgers[1]])
    batch.keep_ledgers |= set(schema_ledgers)
    for unit in range(units):
        topic = f"{namespace}/t{unit}-partition-{rng.randrange(4)}"
        # The other cluster's ledger of this topic drawn before ours (below our newest, as a geo-replicated
        # topic's are), and its newest after ours: it keeps rolling (a newest below our trims would rightly
        # hold them until it rolls past, the workflow's newer-than-listed bound across stores).
        peer_ids = peer.new_ledger_ids(1) if peer is not None else []
        trimmed = cluster.new_ledger_ids(3)
        diverged = cluster.new_ledger_ids(1) if diverge else []
        late, failed, live, cursor_ledger, foreign = cluster.new_ledger_ids(5)
        offloaded = {trimmed[0], *(diverged if unit == 0 else [])}
        cluster.create_topic(topic, [*trimmed, *diverged, late, failed, live], offloaded=offloaded)
        cluster.add_cursor(topic, "sub", cursor_ledger)
        cluster.add_foreign_ledger(foreign, application="distributedlog")
        batch.keep_ledgers |= {live, cursor_ledger, foreign}
        for request in cluster.requests_for_trim(topic, trimmed):
            ledger = request.ledger_id
            if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
                exp = Expectation(
                    request, "delete", DELETE_OUTCOMES, objects=cluster.offload_keys(topic, ledger)
                )
            else:
                exp = Expectation(request, "delete", DELETE_OUTCOMES, ledgers={ledger})
            batch.expect(exp, copies=2 if ledger == trimmed[1] else 1)
        batch.marks.append((0.0, topic, list(trimmed)))
        (late_request,) = cluster.requests_for_trim(topic, [late])
        batch.expect(Expectation(late_request, "delete", DELETE_OUTCOMES, ledgers={late}))
        batch.marks.append((1.0, topic, [late]))
        (failed_request,) = cluster.requests_for_trim(topic, [failed])
        batch.expect(Expectation(failed_request, "in_use", IN_USE_OUTCOMES, ledgers={failed}))
        for request in cluster.requests_for_trim(topic, diverged):
            ledger = request.ledger_id
            if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
                exp = Expectation(
                    request, "replay", REPLAY_OUTCOMES, objects=cluster.offload_keys(topic, ledger)
                )
            else:
                exp = Expectation(request, "replay", REPLAY_OUTCOMES, ledgers={ledger})
            batch.expect(exp)
        if diverged:
            batch.divergences.append((topic, diverged))
        forged = [
            # another topic's live ledger named as ours
            PendingDeleteLedgerInfo(
                topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, other_ids[unit % 2]
            ),
            # a cursor ledger claimed as data (in-use check off, so only BK metadata can stop it)
            PendingDeleteLedgerInfo(
                topic,
                LedgerComponent.MANAGED_LEDGER,
                LedgerType.LEDGER,
                cursor_ledger,
                check_ledger_still_in_use=False,
            ),
            # a ledger of another application
            PendingDeleteLedgerInfo(
                topic,
                LedgerComponent.MANAGED_LEDGER,
                LedgerType.LEDGER,
                foreign,
                check_ledger_still_in_use=False,
            ),
        ]
        if unit == 0:
            # a schema ledger of another schema (each schema ledger is claimed once per batch)
            forged.append(
                PendingDeleteLedgerInfo(
                    schema_a,
                    LedgerComponent.SCHEMA_STORAGE,
                    LedgerType.LEDGER,
                    schema_ledgers[1],
                    schema_id=schema_a,
                    check_ledger_still_in_use=False,
                )
            )
        for request in forged:
            if request.workflow_id not in batch.expectations:
                batch.expect(Expectation(request, "mismatch", MISMATCH_OUTCOMES, ledgers={request.ledger_id}))
        batch.garbage.append(b"\x00garbage-" + uuid.uuid4().bytes + bytes([unit]))
        if peer is not None:
            peer_ids += peer.new_ledger_ids(1)
            _peer_unit(batch, peer, topic, peer_ids, f"{namespace}-peer/t{unit}")
    return batch


def _peer_unit(batch: Batch, peer: SimulatedCluster, topic: str, ids: list[int], only_theirs: str) -> None:
    """The other cluster's share of a unit: ``topic`` geo-replicated there with ``ids``, and a topic of a
    namespace only it has; a request for a ledger of each, which must keep every one of its ledgers."""
    peer.create_topic(topic, ids)
    theirs = peer.new_ledger_ids(2)
    peer.create_topic(only_theirs, theirs)
    batch.keep_ledgers |= {*ids, *theirs}
    for name, ledger in ((topic, ids[0]), (only_theirs, theirs[0])):
        request = PendingDeleteLedgerInfo(name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger)
        batch.expect(Expectation(request, "peer", PEER_OUTCOMES, ledgers={ledger}))


def publish_batch(batch: Batch, publisher: RequestPublisher, rng: random.Random | None = None) -> int:
    """Publish every message (shuffled when ``rng`` is given: reordering across partitions). Returns count."""
    order: list[PendingDeleteLedgerInfo | bytes] = [*batch.messages, *batch.garbage]
    if rng is not None:
        rng.shuffle(order)
    for item in order:
        _retrying(lambda item=item: _send(publisher, item))  # type: ignore[misc]
    return len(order)


def _send(publisher: RequestPublisher, item: PendingDeleteLedgerInfo | bytes) -> str:
    return publisher.publish_raw(item) if isinstance(item, bytes) else publisher.publish(item)


def _retrying(send: Callable[[], object], attempts: int = 60) -> None:
    # pulsar-lite may be restarting (a fault of the soak): a producer reconnects, we just try again.
    for attempt in range(attempts):
        try:
            send()
            return
        except LedgerDeletionError:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0)


async def run_marks(batch: Batch, started: float) -> None:
    """The mark phase's metadata updates, each at its delay after publishing (retried through ZK faults)."""
    for delay, topic, ids in sorted(batch.marks, key=lambda m: m[0]):
        await asyncio.sleep(max(0.0, started + delay - time.monotonic()))
        for _ in range(120):
            try:
                await asyncio.to_thread(batch.cluster.remove_ledgers_from_metadata, topic, ids)
                break
            except Exception as exc:  # ZooKeeper may be down (a fault under test): the broker would retry too
                log.info("metadata update of %s failed (%s); retrying", topic, type(exc).__name__)
                await asyncio.sleep(1.0)


async def latest_result(client: Client, workflow_id: str, timeout: float) -> DeletionResult:
    """The result of the latest run of ``workflow_id``, waiting for it to exist and to close."""
    from temporalio.client import WorkflowFailureError
    from temporalio.service import RPCError

    deadline = time.monotonic() + timeout
    while True:
        try:
            handle = client.get_workflow_handle(workflow_id, result_type=DeletionResult)
            return await asyncio.wait_for(handle.result(), timeout=max(1.0, deadline - time.monotonic()))
        except (RPCError, WorkflowFailureError) as exc:
            # Not started yet, or Temporal restarting (a fault under test).
            if time.monotonic() > deadline:
                raise TimeoutError(f"{workflow_id}: no result within {timeout:.0f} s ({exc})") from exc
            await asyncio.sleep(0.5)


async def settle(
    client: Client, batch: Batch, timeout: float = 180.0
) -> tuple[dict[str, DeletionResult], dict[str, str]]:
    """Wait for every expected workflow; returns (results, unexpected outcomes by workflow id)."""
    ids = sorted(batch.expectations)
    results = await asyncio.gather(*(latest_result(client, i, timeout) for i in ids))
    by_id = dict(zip(ids, results, strict=True))
    wrong = {
        i: f"{batch.expectations[i].kind}: got {r.outcome.value} {r.reason}".strip()
        for i, r in by_id.items()
        if r.outcome not in batch.expectations[i].outcomes
    }
    return by_id, wrong


async def replay_kept(
    client: Client, settings: Settings, batch: Batch, control: EmulatorControl, timeout: float = 180.0
) -> dict[str, str]:
    """The owner's next store write lands for every divergence (the ledgers listed nowhere now; the topic
    reloaded), and the requests kept for replay are replayed from the dead-letter topic
    (``ledger_deletion.ops.dlq.replay``): each must then be deleted. Their expectations become deletions,
    for ``storage_report``. Returns unexpected outcomes by workflow id."""
    from ledger_deletion.ops import dlq

    kept = {wid: e for wid, e in batch.expectations.items() if e.kind == "replay"}
    if not kept:
        return {}
    before = {wid: (await client.get_workflow_handle(wid).describe()).run_id for wid in kept}
    for topic, ids in batch.divergences:
        await asyncio.to_thread(batch.cluster.remove_ledgers_from_metadata, topic, ids)
        await asyncio.to_thread(control.reload, topic)
    report = await asyncio.to_thread(dlq.replay, settings, lambda letter: letter.workflow_id in kept)
    wrong = {
        wid: "replay: not in the dead-letter topic"
        for wid in kept
        if wid not in {letter.workflow_id for letter in report.replayed}
    }
    for wid, exp in kept.items():
        exp.kind, exp.outcomes = "delete", DELETE_OUTCOMES
        if wid in wrong:
            continue
        result = await _result_after(client, wid, before[wid], timeout)
        if result.outcome not in DELETE_OUTCOMES:
            wrong[wid] = f"replay: got {result.outcome.value} {result.reason}".strip()
    return wrong


async def _result_after(
    client: Client, workflow_id: str, previous_run: str, timeout: float
) -> DeletionResult:
    """The result of a run of ``workflow_id`` other than ``previous_run``, once one has started."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            run = (await client.get_workflow_handle(workflow_id).describe()).run_id
        except Exception:  # Temporal restarting: ask again
            run = previous_run
        if run != previous_run:
            handle = client.get_workflow_handle(workflow_id, run_id=run, result_type=DeletionResult)
            return await asyncio.wait_for(handle.result(), timeout=max(1.0, deadline - time.monotonic()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{workflow_id}: the replayed request started no new run in {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def running_workflows(client: Client, settings: Settings) -> list[str]:
    """Ids of workflows still running on the settings' workflow task queue."""
    query = f'TaskQueue="{settings.task_queue("workflow")}" AND ExecutionStatus="Running"'
    return [wf.id async for wf in client.list_workflows(query)]


async def wait_quiet(
    client: Client, settings: Settings, timeout: float = 120.0, quiet: float = 3.0
) -> list[str]:
    """Until no workflow of these task queues has run for ``quiet`` seconds; returns those still running."""
    deadline = time.monotonic() + timeout
    calm_since: float | None = None
    running: list[str] = []
    while time.monotonic() < deadline:
        try:
            running = await running_workflows(client, settings)
        except Exception as exc:  # visibility unavailable for a moment (Temporal restarting)
            log.info("list_workflows failed: %s", exc)
            running = ["?"]
        if running:
            calm_since = None
        elif calm_since is None:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= quiet:
            return []
        await asyncio.sleep(0.5)
    return running


# --- faults -------------------------------------------------------------------------------------------------


# PulsarWebResource.validateTopicOwnershipAsync: no web service URL for the bundle yet; the lookup failing.
ROLLING_RESTART_REASONS = (
    "Failed to find ownership for topic:persistent://{topic}",
    "Can't find owner for topic persistent://{topic}",
)


def rolling_restart_storm(control: EmulatorControl, batch: Batch, rng: random.Random) -> int:
    """Every topic of the batch answers, for a few calls of any admin endpoint, what its broker answers
    while a rolling restart moves its bundle: 412 "Failed to find ownership" / "Can't find owner", 503, or
    a dropped connection. Each is retried; none may dead-letter a request. Returns the answers queued."""
    from devstack.broker_state import Fault

    queued = 0
    for topic in batch.topics:
        for _ in range(rng.randint(1, 2)):
            times = rng.randint(1, 3)
            kind = rng.random()
            if kind < 0.15:
                fault = Fault(times=times, drop_connection=True)
            elif kind < 0.3:
                fault = Fault(times=times, status=503, reason="Service Unavailable")
            else:
                fault = Fault(times=times, reason=rng.choice(ROLLING_RESTART_REASONS).format(topic=topic))
            control.fail_next(topic, fault)
            queued += times
    return queued


@dataclass
class FaultKit:
    services: ServiceControl
    pools: PoolSet
    proxy: S3FaultProxy
    rng: random.Random
    control: EmulatorControl | None = None  # the admin emulator's test hook (the brokers' faults)
    batch: Batch | None = None  # the round's batch, once built
    # Set once the round's requests are published (see owner_and_store_disagree).
    published: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once the round's metadata updates have landed (see zookeeper_outage).
    marked: asyncio.Event = field(default_factory=asyncio.Event)

    async def kill_pool(self) -> str:
        pool = self.rng.choice(self.pools.pools)
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        self.pools.kill9(pool)
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(self.pools.restart, pool)
        return f"kill -9 {pool} pool"

    async def pulsar_pool_before_ack(self) -> str:
        # Requests are in their in-use grace (metadata lands 1 s later): workflows started, acks not sent.
        await asyncio.sleep(self.rng.uniform(0.3, 1.0))
        self.pools.kill9("pulsar")
        await asyncio.sleep(self.rng.uniform(1.0, 3.0))
        await asyncio.to_thread(self.pools.restart, "pulsar")
        return "kill -9 pulsar pool between start and ack"

    async def zookeeper_outage(self) -> str:
        # After the mark phase's metadata updates: an outage that delays a "late" update beyond the in-use
        # grace turns that ledger into a (correct) SKIPPED_IN_USE, which this round expects to be deleted.
        await self.marked.wait()
        await asyncio.sleep(self.rng.uniform(0.0, 1.0))
        await asyncio.to_thread(self.services.stop, "zookeeper")
        down = self.rng.uniform(3.0, 8.0)
        await asyncio.sleep(down)
        await asyncio.to_thread(self.services.start)
        return f"ZooKeeper stopped {down:.0f} s"

    async def s3_errors(self) -> str:
        seconds = self.rng.uniform(5.0, 12.0)
        mode = self.rng.choice(["500", "503", "SlowDown", "mixed"])
        self.proxy.fail(mode, seconds)  # type: ignore[arg-type]
        await asyncio.sleep(seconds)
        return f"S3 answering {mode} for {seconds:.0f} s"

    async def s3_down(self) -> str:
        self.proxy.go_down()
        seconds = self.rng.uniform(4.0, 10.0)
        await asyncio.sleep(seconds)
        self.proxy.come_back()
        return f"S3 unreachable {seconds:.0f} s"

    async def temporal_restart(self) -> str:
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(self.services.kill9, "temporal")
        await asyncio.to_thread(self.services.start)
        return "Temporal dev server kill -9 + restart"

    async def pulsar_restart(self) -> str:
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(self.services.kill9, "pulsar")
        await asyncio.to_thread(self.services.start)
        return "pulsar-lite kill -9 + restart"

    async def transient_412_storm(self) -> str:
        assert self.control is not None and self.batch is not None
        queued = await asyncio.to_thread(rolling_restart_storm, self.control, self.batch, self.rng)
        return f"rolling restart: {queued} admin answers of 412/503/dropped connection"

    async def owner_and_store_disagree(self) -> str:
        # The batch was built with divergences (run_soak); the brokers' trims reach memory as the requests
        # are sent, and their store writes fail.
        assert self.control is not None and self.batch is not None
        await self.published.wait()
        await asyncio.to_thread(self.batch.apply_divergences, self.control)
        return f"owner and store disagree on {sum(len(ids) for _, ids in self.batch.divergences)} ledger(s)"

    def random_fault(self, only: frozenset[str] = frozenset()) -> Callable[[], Coroutine[Any, Any, str]]:
        """One fault, at random; from ``only`` (their method names) when given."""
        faults: list[Callable[[], Coroutine[Any, Any, str]]] = [
            self.kill_pool,
            self.pulsar_pool_before_ack,
            self.zookeeper_outage,
            self.s3_errors,
            self.s3_down,
            self.temporal_restart,
            self.pulsar_restart,
            *([self.transient_412_storm, self.owner_and_store_disagree] if self.control else []),
        ]
        chosen = [f for f in faults if not only or f.__name__ in only]
        if not chosen:
            names = ", ".join(f.__name__ for f in faults)
            raise ValueError(f"no fault among {sorted(only)}; the faults are {names}")
        return self.rng.choice(chosen)


async def _restore(kit: FaultKit) -> None:
    """Every service healthy and the S3 proxy serving again, whatever the fault left behind."""
    kit.proxy.heal()
    kit.proxy.come_back()
    for attempt in range(10):
        try:
            await asyncio.to_thread(kit.services.start)
            return
        except Exception as exc:  # a port still closing, a slow start: try again
            log.warning("restoring the stack failed (attempt %d): %s", attempt + 1, exc)
            await asyncio.sleep(3.0)


# --- the soak -----------------------------------------------------------------------------------------------


@dataclass
class SoakCounts:
    requests: int = 0
    deleted: int = 0
    kept_in_use: int = 0
    kept_for_replay: int = 0  # kept, dead-lettered, then deleted when the round replayed them
    kept_mismatch: int = 0
    kept_other_cluster: int = 0  # the second cluster's ledgers requested: kept
    dead_lettered: int = 0
    unacked: int = 0
    wrongly_deleted: int = 0
    left_orphaned: int = 0
    unexpected_outcomes: int = 0
    stuck: int = 0
    injector_errors: int = 0

    def line(self) -> str:
        return (
            f"requests={self.requests} deleted={self.deleted} kept_in_use={self.kept_in_use} "
            f"kept_for_replay={self.kept_for_replay} kept_mismatch={self.kept_mismatch} "
            f"kept_other_cluster={self.kept_other_cluster} dead_lettered={self.dead_lettered} "
            f"unacked={self.unacked} "
            f"wrongly_deleted={self.wrongly_deleted} left_orphaned={self.left_orphaned}"
        )


def soak_ports() -> Any:
    from devstack import ports

    # A block of its own (devstack.ports), apart from the shared stack's and the fault tests'.
    return ports.block(ports.SOAK)


def soak_proxy_port() -> int:
    from devstack import ports

    return ports.s3_proxy(ports.SOAK)


def soak_settings(endpoints: StackEndpoints, proxy_url: str, run_id: str) -> Settings:
    return endpoints.settings(
        s3_endpoint=proxy_url,
        # The offload driver metadata the cluster writes names moto itself: the proxy is the same store.
        s3_endpoint_aliases=endpoints.s3_endpoint,
        topic=f"persistent://pulsar/system/__ledger_deletion_soak_{run_id}",
        task_queue_prefix=f"ld-soak-{run_id}",
        # Retries outlast every injected fault (longest: ~15 s incl. restart), as production's 10 x up to
        # 600 s outlast real outages: a transient fault must never turn an eligible ledger into a dead letter.
        max_attempts=12,
        retry_initial_seconds=0.5,
        retry_max_interval_seconds=4.0,
        activity_timeout_seconds=20,
        zookeeper_timeout_seconds=5,
        in_use_rechecks=3,
        in_use_recheck_seconds=1.5,
        ack_schedule_to_start_seconds=5,
        shutdown_grace_seconds=3,
        # A second Pulsar cluster writes to the same BookKeeper (build_batch's peer), its store declared.
        bookkeeper_shared_with=peer_store(endpoints.zookeeper),
    )


async def run_soak(
    minutes: float,
    state_dir: Path,
    *,
    seed: int | None = None,
    units: int = 3,
    faults: frozenset[str] = frozenset(),
    echo: Callable[[str], None] = print,
    keep_stack: bool = False,
) -> SoakCounts:
    from temporalio.client import Client

    from devstack.broker_state import EmulatorControl
    from devstack.cluster import SimulatedCluster
    from devstack.faults import PoolSet, S3FaultProxy, ServiceControl, count_redeliverable, read_dead_letters
    from devstack.stack import DUMMY_AWS_CREDENTIALS, S3_REGION, SERVICES, Stack
    from ledger_deletion.submit import RequestPublisher

    seed = seed if seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    run_id = uuid.uuid4().hex[:8]
    stack = Stack(state_dir, soak_ports())
    was_running = any(stack.pid(service) is not None for service in SERVICES)
    endpoints = await asyncio.to_thread(stack.up)
    proxy = S3FaultProxy(endpoints.s3_endpoint, port=soak_proxy_port()).start()
    settings = soak_settings(endpoints, proxy.url, run_id)
    echo(f"soak {run_id}: seed={seed} minutes={minutes} stack={state_dir}")
    counts = SoakCounts()
    zk = endpoints.zookeeper_client()
    s3 = endpoints.s3_client()
    pools = PoolSet(
        settings,
        state_dir / "logs" / f"soak-{run_id}",
        extra_env={**DUMMY_AWS_CREDENTIALS, "AWS_DEFAULT_REGION": S3_REGION},
    )
    control = EmulatorControl(endpoints.pulsar_admin_url)
    kit = FaultKit(ServiceControl(stack), pools, proxy, rng, control)
    client = await Client.connect(endpoints.temporal_address)
    await asyncio.to_thread(pools.start)
    deadline = time.monotonic() + minutes * 60
    round_no = 0
    try:
        while time.monotonic() < deadline:
            round_no += 1
            cluster = SimulatedCluster(zk, s3, bucket=endpoints.offload_bucket)
            peer = SimulatedCluster(zk, s3, bucket=endpoints.offload_bucket, metadata_root=PEER_ROOT)
            fault = kit.random_fault(faults)
            diverge = fault == kit.owner_and_store_disagree
            batch = await asyncio.to_thread(
                functools.partial(
                    build_batch, cluster, f"soak-{run_id}/r{round_no}", rng, units, diverge=diverge, peer=peer
                )
            )
            kit.batch = batch
            kit.published.clear()
            kit.marked.clear()
            fault_task = asyncio.create_task(fault())
            with RequestPublisher(settings) as publisher:
                sent = await asyncio.to_thread(publish_batch, batch, publisher, rng)
            kit.published.set()
            counts.requests += sent
            await run_marks(batch, time.monotonic())
            kit.marked.set()
            try:
                what = await fault_task
            except Exception as exc:  # the injector itself failed: say so, restore the stack, carry on
                what = f"fault {fault.__name__} failed: {type(exc).__name__}: {exc}"[:300]
                counts.injector_errors += 1
            await _restore(kit)
            try:
                results, wrong = await settle(client, batch, timeout=240)
            except TimeoutError as exc:
                counts.stuck += 1
                echo(f"round {round_no}: STUCK {exc}")
                results, wrong = {}, {}
            for exp in batch.expectations.values():
                if exp.kind == "delete":
                    counts.deleted += 1
                elif exp.kind == "in_use":
                    counts.kept_in_use += 1
                elif exp.kind == "replay":
                    counts.kept_for_replay += 1
                elif exp.kind == "peer":
                    counts.kept_other_cluster += 1
                else:
                    counts.kept_mismatch += 1
            if batch.divergences and results:
                # What was kept must still be there; then the owner's store write, and the replay deletes.
                counts.wrongly_deleted += await asyncio.to_thread(batch.replay_kept_lost)
                try:
                    wrong |= await replay_kept(client, settings, batch, control)
                except TimeoutError as exc:
                    counts.stuck += 1
                    echo(f"round {round_no}: replay STUCK {exc}")
            counts.unexpected_outcomes += len(wrong)
            bad, left, problems = await asyncio.to_thread(batch.storage_report)
            counts.wrongly_deleted += bad
            counts.left_orphaned += left
            # Every pool must be up before the next fault (a killed pool restarts inside its fault).
            for name, process in pools.processes.items():
                if not process.alive:
                    echo(f"round {round_no}: pool {name} died on its own; restarting")
                    await asyncio.to_thread(pools.restart, name)
            echo(
                f"round {round_no}: {what}; {sent} messages, {len(results)} workflows closed, "
                f"unexpected={len(wrong)} problems={problems[:3]} {list(wrong.values())[:2]}"
            )
        still = await wait_quiet(client, settings, timeout=180)
        counts.stuck += len(still)
    finally:
        await asyncio.to_thread(pools.stop)
        proxy.stop()
        control.close()
    counts.unacked = await asyncio.to_thread(count_redeliverable, settings, 5.0)
    counts.dead_lettered = len(await asyncio.to_thread(read_dead_letters, settings, 3.0))
    zk.stop()
    zk.close()
    if not (keep_stack or was_running):
        # A private stack is the soak's own: stopped with it (one it found running is left as it was).
        await asyncio.to_thread(stack.down)
    echo(
        f"rounds={round_no} unexpected_outcomes={counts.unexpected_outcomes} stuck_workflows={counts.stuck} "
        f"injector_errors={counts.injector_errors} "
        f"s3_proxy_requests={proxy.requests} s3_injected_errors={proxy.failed}"
    )
    echo(counts.line())
    return counts


def soak(
    minutes: float = 30.0,
    state_dir: Path | None = None,
    seed: int | None = None,
    units: int = 3,
    faults: str = "",
    keep_stack: bool = False,
) -> None:
    """Run a mixed workload with random faults for MINUTES on a private stack; print the invariants' counts.

    Every round also has a second Pulsar cluster write to the same BookKeeper (its metadata store in a
    chroot of its own, declared in LEDGER_DELETION_BOOKKEEPER_SHARED_WITH) and requests some of its ledgers:
    none may be deleted. The private stack is stopped at the end unless --keep-stack (or it was running).

    Faults, one per round: kill -9 of a pool (workflow, pulsar, bookkeeper, offload), the pulsar pool killed
    between start and ack, ZooKeeper stopped for seconds, S3 answering 500/503/SlowDown, S3 unreachable,
    the Temporal dev server killed and restarted, pulsar-lite killed and restarted, the brokers' passing
    answers of a rolling restart (412 "Failed to find ownership", 503, dropped connections), and owners
    and stores that disagree (trims whose store write failed: kept for replay, replayed, deleted). Exit
    code 1 when any of wrongly_deleted, left_orphaned, unacked is not 0.
    """
    from devstack.stack import default_state_dir

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The soak stops ZooKeeper on purpose: kazoo's reconnect warnings would bury the round summaries.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    directory = state_dir or default_state_dir().with_name("soak-stack")

    def echo(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}" if not text.startswith("requests=") else text, flush=True)

    only = frozenset(name.strip() for name in faults.split(",") if name.strip())
    counts = asyncio.run(
        run_soak(minutes, directory, seed=seed, units=units, faults=only, echo=echo, keep_stack=keep_stack)
    )
    if counts.wrongly_deleted or counts.left_orphaned or counts.unacked:
        raise typer.Exit(1)


def soak_cli(
    minutes: Annotated[float, typer.Option(help="How long to run.")] = 30.0,
    state_dir: Annotated[
        Path | None, typer.Option(help="The soak's own stack (default: next to the default stack).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (printed at start) to replay a run.")] = None,
    units: Annotated[int, typer.Option(help="Topics per round (each ~12 requests).")] = 3,
    faults: Annotated[
        str,
        typer.Option(help="Only these faults, comma-separated (FaultKit method names, e.g. kill_pool)."),
    ] = "",
    keep_stack: Annotated[
        bool, typer.Option(help="Leave the private stack running at the end (to look at its workflows).")
    ] = False,
) -> None:
    soak(minutes, state_dir, seed, units, faults, keep_stack)


soak_cli.__doc__ = soak.__doc__
