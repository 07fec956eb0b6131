"""Benchmark B keeps what the service keeps, as the service does: a schema ledger its locator lists (in use),
a data or cursor ledger Pulsar's metadata store lists and a new ledger still open (dead-lettered for replay
after the grace); and deletes one released during the grace.

Real ZooKeeper, pulsar-lite and admin emulator on the shared stack; the requests do not ask the owner broker
(``checkLedgerStillInUse`` false) where the metadata store alone must keep the ledger.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from bench.mix import LateTrims, Seeded
from bench.phases import InUseReports
from bench.pip186_consumer import Pip186Consumer
from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import Outcome
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher

pytestmark = pytest.mark.stack


def test_b_keeps_what_pulsar_still_lists_and_deletes_what_it_released(
    settings: Settings, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    own = settings.with_overrides(
        topic=f"{settings.topic}-decides-{suffix}",
        subscription=f"decides-{suffix}",
        dead_letter_topic=f"{settings.topic}-decides-{suffix}-DLQ",
        in_use_rechecks=2,
        in_use_recheck_seconds=0.5,
        min_ledger_age_seconds=5.0,
    )
    topic = f"bench-b-{suffix}/ns/t"
    # Ascending ids: the ledger still listed is the topic's newest, as the one it writes to would be.
    trimmed, late, listed, cursor, schema = cluster.new_ledger_ids(5)
    cluster.create_topic(topic, [trimmed, listed, late])
    cluster.add_cursor(topic, "sub", cursor)
    cluster.add_schema(topic, [schema])
    (trim_request,) = cluster.requests_for_trim(topic, [trimmed])
    cluster.remove_ledgers_from_metadata(topic, [trimmed])
    (late_request,) = cluster.requests_for_trim(topic, [late])
    opened = cluster.roll_over(topic)  # created a moment ago, open, listed nowhere yet
    name = trim_request.topic_name  # persistent://bench-b-…/ns/t
    requests = {
        "trimmed": trim_request,
        "listed": PendingDeleteLedgerInfo(
            name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, listed, check_ledger_still_in_use=False
        ),
        "cursor": PendingDeleteLedgerInfo(
            name,
            LedgerComponent.MANAGED_CURSOR,
            LedgerType.LEDGER,
            cursor,
            cursor_name="sub",
            check_ledger_still_in_use=False,
        ),
        "schema": PendingDeleteLedgerInfo(
            name,
            LedgerComponent.SCHEMA_STORAGE,
            LedgerType.LEDGER,
            schema,
            schema_id=topic,
            check_ledger_still_in_use=False,
        ),
        "late": late_request,
        "open": PendingDeleteLedgerInfo(
            name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, opened, check_ledger_still_in_use=False
        ),
    }
    reports = tmp_path / "in-use.txt"
    releases = LateTrims(cluster, Seeded("decides", late={late_request.workflow_id: (topic, late)}))
    consumer = Pip186Consumer(
        own, reconsume_seconds=1.0, max_reconsume=2, concurrency=4, in_use_report=reports
    )
    runner = threading.Thread(target=consumer.run, args=(len(requests), 60.0))
    try:
        with InUseReports(reports, releases):
            runner.start()
            with RequestPublisher(own) as publisher:
                for request in requests.values():
                    publisher.publish(request)
            runner.join(timeout=60)
        assert not runner.is_alive()
    finally:
        runner.join(timeout=60)
        consumer.close()

    decided = {m["id"]: m for m in consumer.messages}
    outcome = {name: decided[request.workflow_id]["outcome"] for name, request in requests.items()}
    deliveries = {name: decided[request.workflow_id]["deliveries"] for name, request in requests.items()}
    assert outcome == {
        "trimmed": Outcome.DELETED.value,
        "listed": Outcome.DEAD_LETTERED.value,  # the managed ledger's ledger list
        "cursor": Outcome.DEAD_LETTERED.value,  # the cursor's cursorsLedgerId
        "schema": Outcome.SKIPPED_IN_USE.value,  # the schema locator
        "late": Outcome.DELETED.value,  # released once B found it in use
        "open": Outcome.DEAD_LETTERED.value,  # decided once 5 s old: still open
    }
    # The first delivery, one per re-check of the grace, and the open ledger's wait for its minimum age.
    assert deliveries == {"trimmed": 1, "listed": 3, "cursor": 3, "schema": 3, "late": 2, "open": 4}
    assert "kept for replay" in decided[requests["open"].workflow_id]["reason"]
    assert releases.released == 1
    assert not cluster.ledger_exists(trimmed) and not cluster.ledger_exists(late)
    assert all(cluster.ledger_exists(ledger) for ledger in (listed, cursor, schema, opened))
