"""A small Pulsar cluster with every deletion case, trimmed the way PIP-186's mark phase does.

Shared by ``ledger-deletion demo`` (which prints it) and the end-to-end tests (which assert it), so what the
demo shows is exactly what CI proves. Every case says what the service must do and what storage must look
like afterwards; :meth:`Scenario.check_storage` compares that with ZooKeeper and S3.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import Outcome
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

Publish = Callable[[PendingDeleteLedgerInfo], object]


@dataclass(frozen=True)
class Case:
    label: str
    request: PendingDeleteLedgerInfo
    expected: Outcome
    copies: int = 1  # the same request sent more than once (joins one workflow)


@dataclass
class Scenario:
    cluster: SimulatedCluster
    namespace: str
    cases: list[Case] = field(default_factory=list)
    garbage: list[bytes] = field(default_factory=list)
    # Metadata updates that happen some seconds after the request was sent (the in-use grace at work).
    deferred: list[tuple[float, Callable[[], None]]] = field(default_factory=list)
    ledgers_deleted: set[int] = field(default_factory=set)
    ledgers_kept: set[int] = field(default_factory=set)
    objects_deleted: list[tuple[str, str]] = field(default_factory=list)
    objects_kept: list[tuple[str, str]] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return sum(c.copies for c in self.cases) + len(self.garbage)

    def run_deferred(self, started_at: float) -> None:
        """Run the deferred metadata updates whose time has come (call repeatedly)."""
        now = time.monotonic()
        due = [item for item in self.deferred if started_at + item[0] <= now]
        for item in due:
            item[1]()
            self.deferred.remove(item)

    def check_storage(self) -> list[str]:
        """What differs from the expected end state (empty when all is well)."""
        problems = [
            f"ledger {i} still exists" for i in sorted(self.ledgers_deleted) if self.cluster.ledger_exists(i)
        ]
        problems += [
            f"ledger {i} was deleted" for i in sorted(self.ledgers_kept) if not self.cluster.ledger_exists(i)
        ]
        problems += [
            f"s3://{b}/{k} still exists" for b, k in self.objects_deleted if self.cluster.object_exists(k, b)
        ]
        problems += [
            f"s3://{b}/{k} was deleted" for b, k in self.objects_kept if not self.cluster.object_exists(k, b)
        ]
        return problems


def build_and_mark(
    cluster: SimulatedCluster, namespace: str, publish: Publish, publish_raw: Callable[[bytes], object]
) -> Scenario:
    """Write the cluster, then do the mark phase: publish requests and update metadata, as a broker would."""
    sc = Scenario(cluster, namespace)
    ns = namespace
    p0, p1 = f"{ns}/orders-partition-0", f"{ns}/orders-partition-1"
    a1, a2, a3, a4, a5, a6 = cluster.new_ledger_ids(6)
    b1, b2, b3 = cluster.new_ledger_ids(3)
    c_old, c_live, c_audit, s_old, s_live, pay1, pay2, foreign = cluster.new_ledger_ids(8)
    long_id = 2**32 + cluster.new_ledger_ids(1)[0]  # ids past 2^31 live under the long znode layout
    # BookKeeper's ids only grow (LongZkLedgerIdGenerator takes over once 31-bit ids run out): the topic's
    # ledger created after it has a long id too.
    ev1 = 2**32 + cluster.new_ledger_ids(1)[0]

    cluster.create_partitioned_topic(f"{ns}/orders", 2)
    cluster.create_topic(
        p0,
        [a1, a2, a3, a4, a5, a6],
        offloaded={a1, a2},
        bookkeeper_deleted={a2},
        partitions_of=f"{ns}/orders",
    )
    cluster.create_topic(p1, [b1, b2, b3], metadata_version=2, partitions_of=f"{ns}/orders")
    cluster.add_cursor(p0, "billing", c_old)
    cluster.add_cursor(p1, "audit", c_audit)
    cluster.add_schema(f"{ns}/orders", [s_old, s_live])
    cluster.create_topic(f"{ns}/payments", [pay1, pay2], metadata_version=2)
    cluster.create_topic(f"{ns}/events", [long_id, ev1])
    cluster.add_foreign_ledger(foreign, application="distributedlog")
    unrelated = "unrelated-object-keep-me"
    cluster.s3.put_object(Bucket=cluster.bucket, Key=unrelated, Body=b"not Pulsar's")
    a1_keys = cluster.offload_keys(p0, a1)
    a2_keys = cluster.offload_keys(p0, a2)

    def case(label: str, request: PendingDeleteLedgerInfo, expected: Outcome, copies: int = 1) -> None:
        sc.cases.append(Case(label, request, expected, copies))
        for _ in range(copies):
            publish(request)

    # 1. Retention trims a1..a3 off orders-partition-0: publish, then update metadata (PIP-186 mark phase).
    #    a1 lives in BK and S3 (two requests), a2 only in S3 (bookkeeperDeleted), a3 is requested twice.
    trimmed = cluster.requests_for_trim(p0, [a1, a2, a3])
    labels = {
        (a1, LedgerType.LEDGER): "trimmed ledger (BK copy of an offloaded ledger)",
        (a1, LedgerType.OFFLOAD_LEDGER): "trimmed offloaded ledger: data + index objects",
        (a2, LedgerType.OFFLOAD_LEDGER): "trimmed segment-less offload, BK copy already gone",
        (a3, LedgerType.LEDGER): "trimmed ledger, requested twice: one workflow, both acked",
    }
    for request in trimmed:
        copies = 2 if request.ledger_id == a3 else 1
        case(labels[(request.ledger_id, request.ledger_type)], request, Outcome.DELETED, copies)
    cluster.remove_ledgers_from_metadata(p0, [a1, a2, a3])

    # 2. The request arrives before the metadata update (which lands 2 s later): in use, then free.
    (a4_request,) = cluster.requests_for_trim(p0, [a4])
    case("request before metadata update: in use, then released", a4_request, Outcome.DELETED)
    sc.deferred.append((2.0, lambda: cluster.remove_ledgers_from_metadata(p0, [a4])))

    # 3. The metadata update fails after the request was sent: the ledger stays referenced.
    (a5_request,) = cluster.requests_for_trim(p0, [a5])
    case("metadata update failed: still referenced, kept", a5_request, Outcome.SKIPPED_IN_USE)

    # 4. The cursor moved to a new ledger: the old cursor ledger goes, the live one stays.
    cluster.add_cursor(p0, "billing", c_live)
    cursor = PendingDeleteLedgerInfo(
        p0, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, c_old, cursor_name="billing"
    )
    case("old cursor ledger", cursor, Outcome.DELETED)
    live_cursor = PendingDeleteLedgerInfo(
        p0, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, c_live, cursor_name="billing"
    )
    case("live cursor ledger (bogus request)", live_cursor, Outcome.SKIPPED_IN_USE)

    # 5. A schema version was dropped: its ledger goes, the live schema ledger stays.
    cluster.add_schema(f"{ns}/orders", [s_live])
    schema_id = f"{ns}/orders"
    old_schema = PendingDeleteLedgerInfo(
        f"{ns}/orders", LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, s_old, schema_id=schema_id
    )
    case("old schema ledger", old_schema, Outcome.DELETED)
    live_schema = PendingDeleteLedgerInfo(
        f"{ns}/orders", LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, s_live, schema_id=schema_id
    )
    case("live schema ledger (bogus request)", live_schema, Outcome.SKIPPED_IN_USE)

    # 6. A topic deleted half-way: metadata gone, ledgers (v2 metadata) left behind.
    gone = cluster.requests_for_trim(f"{ns}/payments", [pay1, pay2])
    cluster.delete_topic(f"{ns}/payments")
    for request in gone:
        case("ledger of a deleted topic (v2 metadata)", request, Outcome.DELETED)

    # 7. A ledger with a long id (>= 2^32, 5-level znode path).
    (long_request,) = cluster.requests_for_trim(f"{ns}/events", [long_id])
    cluster.remove_ledgers_from_metadata(f"{ns}/events", [long_id])
    case("long ledger id >= 2^32", long_request, Outcome.DELETED)

    # 8. Forged or stale requests: never delete.
    data = LedgerComponent.MANAGED_LEDGER
    case(
        "forged: another topic's live ledger",
        PendingDeleteLedgerInfo(p0, data, LedgerType.LEDGER, b1),
        Outcome.SKIPPED_METADATA_MISMATCH,
    )
    case(
        "forged: another cursor's ledger",
        PendingDeleteLedgerInfo(
            p0,
            LedgerComponent.MANAGED_CURSOR,
            LedgerType.LEDGER,
            c_audit,
            cursor_name="billing",
            check_ledger_still_in_use=False,
        ),
        Outcome.SKIPPED_METADATA_MISMATCH,
    )
    case(
        "forged: ledger of another application",
        PendingDeleteLedgerInfo(p1, data, LedgerType.LEDGER, foreign),
        Outcome.SKIPPED_NOT_PULSAR,
    )
    # 9. Bytes that are not a request at all.
    sc.garbage.append(b"\x00\xffnot avro")
    publish_raw(sc.garbage[-1])

    sc.ledgers_deleted = {a1, a3, a4, c_old, s_old, pay1, pay2, long_id}
    sc.ledgers_kept = {a5, a6, b1, b2, b3, c_live, c_audit, s_live, foreign, ev1}
    sc.objects_deleted = a1_keys + a2_keys
    sc.objects_kept = [(cluster.bucket, unrelated)]
    return sc
