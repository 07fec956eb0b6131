"""Seeding a realistic mix of orphaned (and not orphaned) ledgers for the benchmark.

Per simulated topic, the way brokers trim in production (23 requests for a topic that exists):

* 12 data ledgers trimmed off the topic (``MANAGED_LEDGER``/``LEDGER``) → DELETED
* 1 offloaded ledger whose BK copy still exists: two requests (``LEDGER`` + ``OFFLOAD_LEDGER``) → DELETED
* 1 offloaded ledger whose BK copy is gone (``bookkeeperDeleted``): one ``OFFLOAD_LEDGER`` request → DELETED
* 1 old cursor ledger (the cursor moved to a new ledger) → DELETED
* 1 old schema ledger (a schema version was dropped) → DELETED
* 1 in use: the request was sent but the metadata update failed → SKIPPED_IN_USE (ledger kept)
* 1 late: the request arrives before the broker's metadata update, which lands while the deleter waits out
  its in-use grace (:class:`LateTrims` does the update) → DELETED after one grace timer
* 1 duplicate: the same request sent twice (the broker retried the send) → DELETED once
* 1 forged: another topic's live ledger claimed by this one → SKIPPED_METADATA_MISMATCH (kept)
* 1 forged: a ledger of another BookKeeper application → SKIPPED_NOT_PULSAR (kept)

Every fourth topic is then deleted half-way (metadata gone, storage left), so its requests skip the owner
broker, as for a deleted topic in production; such a topic has no late or duplicate request (20 requests).
Ledger ids are fresh per seeding (ZooKeeper idgen sequence times 10^6), so runs on the same stack never share
ledgers.

Each request belongs to one *shape*: the path a deletion takes, the rows of the benchmark's count table.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import Outcome
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

_T = TypeVar("_T")

# The shapes, in the order the table lists them.
BK = "BK ledger, topic exists: deleted"
BK_TOPIC_GONE = "BK ledger, topic gone: deleted"
CURSOR = "cursor ledger: deleted"
SCHEMA = "schema ledger: deleted"
OFFLOADED = "offloaded copy, topic exists: deleted"
OFFLOADED_TOPIC_GONE = "offloaded copy, topic gone: deleted"
LATE = "in use, released in the grace: deleted"
DUPLICATE = "duplicate message: deleted once"
IN_USE = "in use through the grace: kept"
MISMATCH = "metadata mismatch: kept"
NOT_PULSAR = "not Pulsar's ledger: kept"
SHAPES = (
    BK,
    BK_TOPIC_GONE,
    CURSOR,
    SCHEMA,
    OFFLOADED,
    OFFLOADED_TOPIC_GONE,
    LATE,
    DUPLICATE,
    IN_USE,
    MISMATCH,
    NOT_PULSAR,
)
# Requests that wait out a grace timer by design: left out of the latency percentiles.
WAITING_SHAPES = (LATE, IN_USE)


@dataclass(frozen=True)
class Expected:
    """One request (one message) and what the service must do with it."""

    request: PendingDeleteLedgerInfo
    outcome: Outcome
    shape: str
    objects: tuple[tuple[str, str], ...] = ()  # an offload request's objects (bucket, key)

    @property
    def workflow_id(self) -> str:
        return self.request.workflow_id


@dataclass
class Seeded:
    """What one seeding wrote, and what the service must do with it."""

    namespace: str
    items: list[Expected] = field(default_factory=list)
    never_requested: set[int] = field(default_factory=set)  # live ledgers nothing asked to delete
    late: dict[str, tuple[str, int]] = field(default_factory=dict)  # workflow id → (topic, ledger id)

    @property
    def requests(self) -> list[PendingDeleteLedgerInfo]:
        return [item.request for item in self.items]

    def shapes(self) -> Counter[str]:
        return Counter(item.shape for item in self.items)

    def by_ledger(self) -> dict[str, Expected]:
        """One item per workflow id (ledger type and id): a duplicate's two messages are one ledger."""
        return {item.workflow_id: item for item in self.items}

    def check_storage(self, cluster: SimulatedCluster, sample: int = 0) -> list[str]:
        """What differs from the expected end state (all of it, or an evenly spread sample)."""
        gone, kept = set[int](), set(self.never_requested)
        objects = set[tuple[str, str]]()
        for item in self.by_ledger().values():
            if item.request.ledger_type is LedgerType.OFFLOAD_LEDGER:
                if item.outcome is Outcome.DELETED:
                    objects.update(item.objects)
            elif item.outcome is Outcome.DELETED:
                gone.add(item.request.ledger_id)
            else:
                kept.add(item.request.ledger_id)
        problems = [
            f"ledger {i} still exists" for i in _spread(sorted(gone), sample) if cluster.ledger_exists(i)
        ]
        problems += [
            f"ledger {i} was deleted" for i in _spread(sorted(kept), sample) if not cluster.ledger_exists(i)
        ]
        problems += [
            f"s3://{bucket}/{key} still exists"
            for bucket, key in _spread(sorted(objects), sample)
            if cluster.object_exists(key, bucket)
        ]
        return problems


def _spread(values: list[_T], sample: int) -> list[_T]:
    if not sample or len(values) <= sample:
        return values
    step = len(values) / sample
    return [values[int(i * step)] for i in range(sample)]


class _Ids:
    def __init__(self, cluster: SimulatedCluster) -> None:
        self._next = cluster.new_ledger_ids(1)[0] * 1_000_000 + 1

    def take(self, count: int = 1) -> list[int]:
        first = self._next
        self._next += count
        return list(range(first, first + count))


def seed(cluster: SimulatedCluster, namespace: str, count: int) -> Seeded:
    """Write enough topics for ``count`` requests (the mark phase's metadata updates included)."""
    out = Seeded(namespace)
    ids = _Ids(cluster)
    index = 0
    while len(out.items) < count:
        _seed_topic(cluster, out, ids, f"{namespace}/t{index}", deleted=index % 4 == 3)
        index += 1
    del out.items[count:]
    # The last topic may be cut short: a duplicate without its second message is an ordinary request, and a
    # late request cut off needs no update (its ledger stays listed, as the broker's own would).
    messages = Counter(item.workflow_id for item in out.items)
    out.items = [
        dataclasses.replace(item, shape=BK)
        if item.shape == DUPLICATE and messages[item.workflow_id] < 2
        else item
        for item in out.items
    ]
    out.late = {w: late for w, late in out.late.items() if w in messages}
    return out


def _seed_topic(cluster: SimulatedCluster, out: Seeded, ids: _Ids, topic: str, *, deleted: bool) -> None:
    data = ids.take(12)
    off_bk, off_only, in_use, late, duplicate, live, live2 = ids.take(7)
    c_old, c_live, s_old, s_live, foreign = ids.take(5)
    trimmed = [*data, off_bk, off_only] + ([] if deleted else [duplicate])
    cluster.create_topic(
        topic,
        [*data, off_bk, off_only, duplicate, in_use, late, live, live2],
        offloaded={off_bk, off_only},
        bookkeeper_deleted={off_only},
    )
    cluster.add_cursor(topic, "sub", c_old)
    cluster.add_cursor(topic, "sub", c_live)  # the cursor rolled over: c_old is an orphan
    cluster.add_schema(topic, [s_old, s_live])
    cluster.add_schema(topic, [s_live])  # a schema version was dropped: s_old is an orphan
    cluster.add_foreign_ledger(foreign, application="distributedlog")
    bk, offloaded = (BK_TOPIC_GONE, OFFLOADED_TOPIC_GONE) if deleted else (BK, OFFLOADED)

    def add(request: PendingDeleteLedgerInfo, outcome: Outcome, shape: str) -> None:
        objects: tuple[tuple[str, str], ...] = ()
        if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
            assert request.context is not None  # an offload request carries its ledger's stored info
            objects = tuple(cluster.offload_keys(request.context, request.ledger_id))
        out.items.append(Expected(request, outcome, shape, objects))

    requests = cluster.requests_for_trim(topic, trimmed)
    (in_use_request,) = cluster.requests_for_trim(topic, [in_use])
    late_requests = [] if deleted else cluster.requests_for_trim(topic, [late])
    cluster.remove_ledgers_from_metadata(topic, trimmed)
    for request in requests:
        if request.ledger_id == duplicate:
            add(request, Outcome.DELETED, DUPLICATE)
            add(request, Outcome.DELETED, DUPLICATE)
        else:
            add(
                request,
                Outcome.DELETED,
                offloaded if request.ledger_type is LedgerType.OFFLOAD_LEDGER else bk,
            )
    add(
        PendingDeleteLedgerInfo(
            topic, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, c_old, cursor_name="sub"
        ),
        Outcome.DELETED,
        BK_TOPIC_GONE if deleted else CURSOR,
    )
    add(
        PendingDeleteLedgerInfo(
            topic, LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, s_old, schema_id=topic
        ),
        Outcome.DELETED,
        BK_TOPIC_GONE if deleted else SCHEMA,
    )
    # A deleted topic takes its in-use ledger with it: nothing references it any more, so it goes too.
    add(in_use_request, Outcome.DELETED if deleted else Outcome.SKIPPED_IN_USE, bk if deleted else IN_USE)
    for request in late_requests:
        add(request, Outcome.DELETED, LATE)
        out.late[request.workflow_id] = (topic, late)
    add(
        PendingDeleteLedgerInfo(
            topic,
            LedgerComponent.MANAGED_CURSOR,
            LedgerType.LEDGER,
            c_live,
            cursor_name="other",
            check_ledger_still_in_use=False,
        ),
        Outcome.SKIPPED_METADATA_MISMATCH,
        MISMATCH,
    )
    add(
        PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, foreign),
        Outcome.SKIPPED_NOT_PULSAR,
        NOT_PULSAR,
    )
    if deleted:
        cluster.delete_topic(topic)
    out.never_requested.update([live, live2, s_live] + ([duplicate, late] if deleted else []))


class LateTrims:
    """The broker's metadata update of the mix's late requests, made once the deleter found the ledger in use.

    A late request was published while its ledger was still listed, as when the broker's update trails its
    send. :meth:`found_in_use` drops the ledger from the managed ledger's list once a deleter (A's workflow
    waiting in its grace, B reconsuming the message for a re-check) reports it; the re-check after the grace
    timer then finds it released and deletes it. An update that fails (the benchmark's ZooKeeper session
    reconnecting on a loaded machine) is made again at the next call.
    """

    def __init__(self, cluster: SimulatedCluster, seeded: Seeded) -> None:
        self._cluster = cluster
        self._pending = dict(seeded.late)
        self._found: set[str] = set()
        self._lock = threading.Lock()
        self.released = 0

    def found_in_use(self, workflow_ids: Iterable[str]) -> None:
        with self._lock:
            self._found.update(w for w in workflow_ids if w in self._pending)
            due = [(w, self._pending[w]) for w in self._found]
        for workflow_id, (topic, ledger_id) in due:
            try:
                self._cluster.remove_ledgers_from_metadata(topic, [ledger_id])
            except Exception as exc:  # kazoo's own errors: connection loss, session expiry; try again later
                print(f"  late trim of ledger {ledger_id} failed, to be made again: {exc!r}", flush=True)
                continue
            with self._lock:
                self._found.discard(workflow_id)
                del self._pending[workflow_id]
                self.released += 1

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)
