"""bench/mix.py seeds whole topics of every shape, and its storage check starts from what it wrote: before any
deletion, every ledger to keep exists and every ledger or object to delete is still there.

Real ZooKeeper and S3 on the shared stack.
"""

from __future__ import annotations

import uuid

import pytest

from bench.mix import (
    BK,
    BK_TOPIC_GONE,
    CURSOR,
    DUPLICATE,
    IN_USE,
    LATE,
    MISMATCH,
    NOT_PULSAR,
    OFFLOADED,
    OFFLOADED_TOPIC_GONE,
    SCHEMA,
    LateTrims,
    seed,
)
from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import Outcome

pytestmark = pytest.mark.stack


def test_four_topics_one_of_them_deleted(cluster: SimulatedCluster) -> None:
    seeded = seed(cluster, f"bench-mix-{uuid.uuid4().hex[:6]}/ns", 3 * 23 + 20)

    assert len(seeded.items) == 89
    assert seeded.shapes() == {
        BK: 3 * 13,  # 12 trimmed data ledgers and the BK copy of an offloaded one, per live topic
        OFFLOADED: 3 * 2,
        CURSOR: 3,
        SCHEMA: 3,
        LATE: 3,
        DUPLICATE: 3 * 2,  # two messages each
        IN_USE: 3,
        MISMATCH: 4,
        NOT_PULSAR: 4,
        BK_TOPIC_GONE: 13 + 3,  # with the deleted topic's cursor, schema and in-use ledgers
        OFFLOADED_TOPIC_GONE: 2,
    }
    assert len(seeded.late) == 3

    problems = seeded.check_storage(cluster)

    # Nothing deleted yet: what must go is still there, and everything to keep exists.
    assert not [p for p in problems if p.endswith("was deleted")]
    to_delete = {item.workflow_id: item for item in seeded.items if item.outcome is Outcome.DELETED}
    objects = sum(len(item.objects) for item in to_delete.values())
    ledgers = sum(1 for item in to_delete.values() if not item.objects)
    assert len(problems) == ledgers + objects
    assert objects > 0


def test_a_late_request_s_ledger_is_released_once(cluster: SimulatedCluster) -> None:
    seeded = seed(cluster, f"bench-mix-{uuid.uuid4().hex[:6]}/ns", 23)
    ((workflow_id, (topic, ledger_id)),) = seeded.late.items()
    late = LateTrims(cluster, seeded)
    assert ledger_id in _listed(cluster, topic)

    late.found_in_use(["some/other/run", workflow_id, workflow_id])

    assert late.released == 1 and late.pending == 0
    assert ledger_id not in _listed(cluster, topic)


def _listed(cluster: SimulatedCluster, topic: str) -> set[int]:
    info = cluster.managed_ledger_info(topic)
    assert info is not None
    return {entry.ledgerId for entry in info.ledgerInfo}
