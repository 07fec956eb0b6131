"""Seeding a realistic mix of orphaned (and not orphaned) ledgers for the throughput benchmark.

Per simulated topic (20 requests), the way brokers trim in production:

* 12 data ledgers trimmed off a topic (``MANAGED_LEDGER``/``LEDGER``) → DELETED
* 1 offloaded ledger whose BK copy still exists: two requests (``LEDGER`` + ``OFFLOAD_LEDGER``) → DELETED
* 1 offloaded ledger whose BK copy is gone (``bookkeeperDeleted``): one ``OFFLOAD_LEDGER`` request → DELETED
* 1 old cursor ledger (the cursor moved to a new ledger) → DELETED
* 1 old schema ledger (a schema version was dropped) → DELETED
* 1 in use: the request was sent but the metadata update failed → SKIPPED_IN_USE (ledger kept)
* 1 forged: another topic's live ledger claimed by this one → SKIPPED_METADATA_MISMATCH (kept)
* 1 forged: a ledger of another BookKeeper application → SKIPPED_NOT_PULSAR (kept)

Every fourth topic is then deleted half-way (metadata gone, storage left), so its requests skip the owner
broker, as for a deleted topic in production. Ledger ids are fresh per seeding (ZooKeeper idgen sequence
times 10^6), so runs on the same stack never share ledgers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import Outcome
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

PER_TOPIC = 20
_T = TypeVar("_T")


@dataclass(frozen=True)
class Expected:
    request: PendingDeleteLedgerInfo
    outcome: Outcome
    kind: str  # data | offload-bk | offload | cursor | schema | in-use | forged


@dataclass
class Seeded:
    """What one seeding wrote, and what the service must do with it."""

    namespace: str
    items: list[Expected] = field(default_factory=list)
    ledgers_deleted: set[int] = field(default_factory=set)
    ledgers_kept: set[int] = field(default_factory=set)
    objects_deleted: list[tuple[str, str]] = field(default_factory=list)

    @property
    def requests(self) -> list[PendingDeleteLedgerInfo]:
        return [item.request for item in self.items]

    def kinds(self) -> Counter[str]:
        return Counter(item.kind for item in self.items)

    def check_storage(self, cluster: SimulatedCluster, sample: int = 0) -> list[str]:
        """What differs from the expected end state (all of it, or an evenly spread sample)."""

        deleted, kept = (
            _spread(sorted(self.ledgers_deleted), sample),
            _spread(sorted(self.ledgers_kept), sample),
        )
        problems = [f"ledger {i} still exists" for i in deleted if cluster.ledger_exists(i)]
        problems += [f"ledger {i} was deleted" for i in kept if not cluster.ledger_exists(i)]
        problems += [
            f"s3://{b}/{k} still exists"
            for b, k in _spread(self.objects_deleted, sample)
            if cluster.object_exists(k, b)
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
    for index in _topics(count):
        _seed_topic(cluster, out, ids, f"{namespace}/t{index}", deleted=index % 4 == 3)
    del out.items[count:]
    return out


def _topics(count: int) -> Iterator[int]:
    topics = -(-count // PER_TOPIC)
    yield from range(topics)


def _seed_topic(cluster: SimulatedCluster, out: Seeded, ids: _Ids, topic: str, *, deleted: bool) -> None:
    data = ids.take(12)
    off_bk, off_only, in_use, live, live2 = ids.take(5)
    c_old, c_live, s_old, s_live, foreign = ids.take(5)
    cluster.create_topic(
        topic,
        [*data, off_bk, off_only, in_use, live, live2],
        offloaded={off_bk, off_only},
        bookkeeper_deleted={off_only},
    )
    cluster.add_cursor(topic, "sub", c_old)
    cluster.add_cursor(topic, "sub", c_live)  # the cursor rolled over: c_old is an orphan
    cluster.add_schema(topic, [s_old, s_live])
    cluster.add_schema(topic, [s_live])  # a schema version was dropped: s_old is an orphan
    cluster.add_foreign_ledger(foreign, application="distributedlog")
    keys = cluster.offload_keys(topic, off_bk) + cluster.offload_keys(topic, off_only)

    def add(request: PendingDeleteLedgerInfo, outcome: Outcome, kind: str) -> None:
        out.items.append(Expected(request, outcome, kind))

    trimmed = cluster.requests_for_trim(topic, [*data, off_bk, off_only])
    for request in trimmed:
        kind = "data"
        if request.ledger_id in (off_bk, off_only):
            kind = "offload" if request.ledger_type is LedgerType.OFFLOAD_LEDGER else "offload-bk"
        add(request, Outcome.DELETED, kind)
    (in_use_request,) = cluster.requests_for_trim(topic, [in_use])
    cluster.remove_ledgers_from_metadata(topic, [*data, off_bk, off_only])
    add(
        PendingDeleteLedgerInfo(
            topic, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, c_old, cursor_name="sub"
        ),
        Outcome.DELETED,
        "cursor",
    )
    add(
        PendingDeleteLedgerInfo(
            topic, LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, s_old, schema_id=topic
        ),
        Outcome.DELETED,
        "schema",
    )
    # A deleted topic takes its in-use ledger with it: nothing references it any more, so it goes too.
    add(in_use_request, Outcome.DELETED if deleted else Outcome.SKIPPED_IN_USE, "in-use")
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
        "forged",
    )
    add(
        PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, foreign),
        Outcome.SKIPPED_NOT_PULSAR,
        "forged",
    )
    if deleted:
        cluster.delete_topic(topic)
    out.ledgers_deleted.update([*data, off_bk, c_old, s_old] + ([in_use] if deleted else []))
    out.ledgers_kept.update([live, live2, c_live, s_live, foreign] + ([] if deleted else [in_use]))
    out.objects_deleted.extend(keys)
