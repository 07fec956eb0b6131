"""Bad and hostile input through the real consumer: ≥ 10,000 malformed payloads, and forged requests.

The corpus (``fuzz_corpus.py``) goes through the pulsar pool's real ingest loop on the real broker: every
payload that cannot be a valid request must reach the dead-letter topic with a reason and be acked; the
few that decode must delete nothing; the consumer must survive all of it. Forged requests (valid messages
that lie about what a ledger is) must delete nothing either.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pulsar
import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import read_dead_letters
from devstack.soak import latest_result
from ledger_deletion.contracts import Outcome
from ledger_deletion.formats.avro import decode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.faults.fuzz_corpus import corpus
from tests.support import running_pools

pytestmark = pytest.mark.stack

# The consumer must keep going, not reach a wall-clock figure: it fails when neither its received count nor
# its unacked set has moved for this long. The whole corpus takes ~110 s alone on two cores, ~160 s beside
# scripts/test's other xdist workers, hence the test's own timeout.
STALL_SECONDS = 30.0


def publish_all(settings: Settings, payloads: list[bytes]) -> None:
    """Asynchronous sends (one round trip per message would dominate the test), then one flush."""
    client = pulsar.Client(settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    failures: list[str] = []
    done = threading.Semaphore(0)

    def sent(result: Any, _message_id: Any) -> None:
        if result != pulsar.Result.Ok:
            failures.append(str(result))
        done.release()

    try:
        producer = client.create_producer(
            settings.topic, batching_enabled=False, max_pending_messages=2000, block_if_queue_full=True
        )
        for payload in payloads:
            producer.send_async(payload, sent)
        producer.flush()
        for _ in payloads:
            done.acquire(timeout=60)
        producer.close()
    finally:
        client.close()
    assert failures == [], f"{len(failures)} sends failed: {Counter(failures)}"


def build_victims(cluster: SimulatedCluster, namespace: str) -> tuple[set[int], list[tuple[str, str]]]:
    """Live ledgers of every kind and offloaded objects that nothing in these tests may delete."""
    topic = f"{namespace}/victim-partition-0"
    data = cluster.new_ledger_ids(3)
    cursor_ledger, schema_ledger, foreign = cluster.new_ledger_ids(3)
    cluster.create_topic(topic, data, offloaded={data[0]})
    cluster.add_cursor(topic, "sub", cursor_ledger)
    cluster.add_schema(f"{namespace}/victim", [schema_ledger])
    cluster.add_foreign_ledger(foreign, application="distributedlog")
    ledgers = {*data, cursor_ledger, schema_ledger, foreign}
    return ledgers, cluster.offload_keys(topic, data[0])


def assert_intact(cluster: SimulatedCluster, ledgers: set[int], objects: list[tuple[str, str]]) -> None:
    assert [i for i in sorted(ledgers) if not cluster.ledger_exists(i)] == []
    assert [k for b, k in objects if not cluster.object_exists(k, b)] == []


@pytest.mark.timeout(480)  # ~160 s for the corpus beside the other workers, then the forged requests
async def test_fuzz_corpus_through_the_real_consumer(
    fault_client: Client, fault_settings: Settings, cluster: SimulatedCluster
) -> None:
    payloads = corpus()
    assert len(payloads) >= 10_000
    invalid = [p.data for p in payloads if not p.valid]
    decodable = [decode_request(p.data) for p in payloads if p.valid]
    victims, victim_objects = build_victims(cluster, "fuzz-victims/ns")
    began = time.monotonic()
    async with running_pools(fault_settings, fault_client) as running:
        assert running.ingestor is not None
        await asyncio.to_thread(publish_all, fault_settings, [p.data for p in payloads])
        published = time.monotonic()
        progress, moved = (-1, -1), time.monotonic()
        while running.ingestor.stats.received < len(payloads) or len(running.ingestor.pending):
            now = (running.ingestor.stats.received, len(running.ingestor.pending))
            if now != progress:
                progress, moved = now, time.monotonic()
            assert time.monotonic() - moved < STALL_SECONDS, (
                f"stalled for {STALL_SECONDS:.0f} s: received {now[0]}/{len(payloads)}, {now[1]} unacked"
            )
            await asyncio.sleep(0.2)
        ingested = time.monotonic()
        outcomes = Counter(
            [(await latest_result(fault_client, r.workflow_id, 60)).outcome for r in decodable]
        )
        assert running.ingestor.stats.dead_lettered == len(invalid)
        resubscribed = running.ingestor.stats.resubscribed
    letters = await asyncio.to_thread(read_dead_letters, fault_settings, 1.0, len(invalid), 120.0)
    finished = time.monotonic()
    print(
        f"\nfuzz: {len(payloads)} payloads ({len(invalid)} invalid, {len(decodable)} decodable): "
        f"published in {published - began:.1f} s, ingested+dead-lettered+acked in {ingested - began:.1f} s, "
        f"DLQ read back in {finished - ingested:.1f} s; decodable outcomes {dict(outcomes)}; "
        f"consumer replaced {resubscribed}x"
    )
    # Every invalid payload is in the DLQ (as a multiset: identical payloads count once each) with a reason.
    missing = Counter(invalid) - Counter(m.data() for m in letters)
    assert sum(missing.values()) == 0, f"{sum(missing.values())} invalid payload(s) not dead-lettered"
    for letter in letters:
        props = letter.properties()
        assert props["ledger-deletion.reason"] and props["ledger-deletion.failed-step"]
    # The decodable ones deleted nothing (no fuzz-tenant ledger exists; a non-S3 driver is refused).
    assert Outcome.DELETED not in outcomes
    assert_intact(cluster, victims, victim_objects)


async def test_forged_requests_delete_nothing(
    fault_client: Client, fault_settings: Settings, cluster: SimulatedCluster
) -> None:
    """Valid messages that lie: each names a live ledger as something it is not."""
    namespace = f"forged-{time.monotonic_ns()}/ns"
    victims, victim_objects = build_victims(cluster, namespace)
    other = f"{namespace}/other-partition-0"
    other_ids = cluster.new_ledger_ids(2)
    cluster.create_topic(other, other_ids, offloaded={other_ids[0]})
    topic = f"{namespace}/victim-partition-0"
    info = cluster.managed_ledger_info(topic)
    assert info is not None
    data_ledger = info.ledgerInfo[1].ledgerId
    cursor = cluster.cursor_info(topic, "sub")
    assert cursor is not None
    schema_ledger, foreign = sorted(
        victims - {li.ledgerId for li in info.ledgerInfo} - {cursor.cursorsLedgerId}
    )
    other_offload = cluster.requests_for_trim(other, [other_ids[0]])[1]
    assert other_offload.ledger_type is LedgerType.OFFLOAD_LEDGER
    forged = {
        # another topic's ledger, claimed as ours (in-use check off: only the BK metadata can refuse it)
        "other topic's ledger": PendingDeleteLedgerInfo(
            topic,
            LedgerComponent.MANAGED_LEDGER,
            LedgerType.LEDGER,
            other_ids[1],
            check_ledger_still_in_use=False,
        ),
        # a cursor ledger claimed as a data ledger
        "cursor ledger as data": PendingDeleteLedgerInfo(
            topic,
            LedgerComponent.MANAGED_LEDGER,
            LedgerType.LEDGER,
            cursor.cursorsLedgerId,
            check_ledger_still_in_use=False,
        ),
        # a data ledger claimed as a cursor ledger
        "data ledger as cursor": PendingDeleteLedgerInfo(
            topic,
            LedgerComponent.MANAGED_CURSOR,
            LedgerType.LEDGER,
            data_ledger,
            cursor_name="sub",
            check_ledger_still_in_use=False,
        ),
        # a schema ledger of another schema
        "schema ledger of another schema": PendingDeleteLedgerInfo(
            f"{namespace}/other",
            LedgerComponent.SCHEMA_STORAGE,
            LedgerType.LEDGER,
            schema_ledger,
            schema_id=f"{namespace}/other",
            check_ledger_still_in_use=False,
        ),
        # a ledger of another application (distributedlog) in the same /ledgers
        "ledger of another application": PendingDeleteLedgerInfo(
            topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, foreign, check_ledger_still_in_use=False
        ),
        # another topic's offloaded objects, claimed by this topic (object metadata names the owner)
        "other topic's offloaded objects": PendingDeleteLedgerInfo(
            topic,
            LedgerComponent.MANAGED_LEDGER,
            LedgerType.OFFLOAD_LEDGER,
            other_ids[0],
            context=other_offload.context,
            check_ledger_still_in_use=False,
        ),
    }
    async with running_pools(fault_settings, fault_client):
        with RequestPublisher(fault_settings) as publisher:
            for request in forged.values():
                publisher.publish(request)
        results = {label: await latest_result(fault_client, r.workflow_id, 60) for label, r in forged.items()}
    refused = {Outcome.SKIPPED_METADATA_MISMATCH, Outcome.SKIPPED_NOT_PULSAR}
    assert {label: r.outcome for label, r in results.items() if r.outcome not in refused} == {}
    assert_intact(
        cluster, victims | set(other_ids), victim_objects + cluster.offload_keys(other, other_ids[0])
    )
