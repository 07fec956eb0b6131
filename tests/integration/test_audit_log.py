"""The audit log on the stack's S3: records written in batches before their acks, read with a plain Parquet
reader, never overwritten, shown once when written twice, and queried by ``ledger-deletion audit``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from rich.console import Console
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.audit.reader import AuditQuery, read
from ledger_deletion.audit.record import AuditRecord
from ledger_deletion.audit.store import AuditStore
from ledger_deletion.audit.writer import AuditWriter
from ledger_deletion.contracts import Outcome
from ledger_deletion.errors import ObjectStoreUnavailable
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from reconcile.cli import audit_decisions
from tests.support import eventually, wait_for_result
from workers.pools import RunningPools

pytestmark = pytest.mark.stack


def _record(n: int, written: datetime) -> AuditRecord:
    return AuditRecord(
        record_id=f"ledger-deletion/LEDGER/{n}/run/{n}:0:-1",
        decided_at=written,
        deleted_at=written,
        written_at=written,
        outcome="DELETED",
        reason="",
        failed_step="",
        mode="live",
        request=f"Delete data ledger {n}",
        request_type="LEDGER",
        ledger_id=n,
        component="MANAGED_LEDGER",
        topic="persistent://audit/batch/t",
        tenant="audit",
        namespace="audit/batch",
        source="broker",
        message_id=f"{n}:0:-1",
        message_topic="",
        redelivery_count=0,
        bytes=1000 + n,
    )


def _objects(s3: Any, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def test_concurrent_acks_share_objects_that_a_plain_parquet_reader_reads(
    stack: StackEndpoints, s3: Any
) -> None:
    prefix = f"test-batch-{uuid.uuid4().hex[:8]}"
    store = AuditStore(stack.audit_bucket, prefix, stack.s3_endpoint)
    batches: list[tuple[str, int]] = []
    writer = AuditWriter(
        store, "w1", linger_seconds=0.2, on_batch=lambda k, n: batches.append((k, n))
    ).start()
    now = datetime.now(UTC)
    callers = [threading.Thread(target=writer.write, args=([_record(n, now)],)) for n in range(40)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=60)
    keys = _objects(s3, stack.audit_bucket, prefix)
    # Group commit: 40 acks at once, a handful of PUTs (the first may go alone, before the rest arrive).
    assert 1 <= len(keys) <= 5, batches
    assert sum(n for _, n in batches) == 40
    assert all(f"/dt={now:%Y-%m-%d}/" in key for key in keys)
    rows = []
    for key in keys:  # pyarrow alone, as Spark or DuckDB would: nothing of the service's code
        rows += pq.read_table(
            io.BytesIO(s3.get_object(Bucket=stack.audit_bucket, Key=key)["Body"].read())
        ).to_pylist()
    assert sorted(row["ledger_id"] for row in rows) == list(range(40))
    assert {row["outcome"] for row in rows} == {"DELETED"}

    # Written again (an ack retried after its record was written): a new object, the record shown once.
    writer.write([_record(7, now)])
    writer.close()
    assert len(_objects(s3, stack.audit_bucket, prefix)) == len(keys) + 1
    assert len(read(store)) == 40
    assert [r.ledger_id for r in read(store, AuditQuery(ledger=7))] == [7]

    # Never overwritten: S3 refuses a PUT on a key that exists, and the object stays as written.
    before = s3.get_object(Bucket=stack.audit_bucket, Key=keys[0])["Body"].read()
    with pytest.raises(ObjectStoreUnavailable, match="PreconditionFailed"):
        store.add(keys[0], b"not parquet")
    assert s3.get_object(Bucket=stack.audit_bucket, Key=keys[0])["Body"].read() == before


async def test_each_decision_is_in_the_log_with_its_evidence(
    cluster: SimulatedCluster,
    service: RunningPools,
    settings: Settings,
    temporal_client: Client,
    publisher: RequestPublisher,
    stack: StackEndpoints,
) -> None:
    namespace = f"audit/ns-{uuid.uuid4().hex[:6]}"
    ids = cluster.new_ledger_ids(2)
    topic = cluster.create_topic(f"{namespace}/t", ids)
    (deleted,) = cluster.requests_for_trim(topic.name, ids[:1])
    cluster.remove_ledgers_from_metadata(topic.name, ids[:1])
    publisher.publish(deleted)
    (foreign_id,) = cluster.new_ledger_ids(1)
    cluster.add_foreign_ledger(foreign_id)
    foreign = PendingDeleteLedgerInfo(
        topic.name,
        LedgerComponent.MANAGED_LEDGER,
        LedgerType.LEDGER,
        foreign_id,
        properties={"source": "submit"},
    )
    publisher.publish(foreign)
    garbage_id = publisher.publish_raw(b"\x00 not avro")
    offloaded_id, current = cluster.new_ledger_ids(2)
    offload_topic = cluster.create_topic(
        f"{namespace}/offloaded",
        [offloaded_id, current],
        offloaded=[offloaded_id],
        bookkeeper_deleted=[offloaded_id],
    )
    (offload,) = cluster.requests_for_trim(offload_topic.name, [offloaded_id])
    cluster.remove_ledgers_from_metadata(offload_topic.name, [offloaded_id])
    assert offload.ledger_type is LedgerType.OFFLOAD_LEDGER
    publisher.publish(offload)
    done = await wait_for_result(temporal_client, deleted.workflow_id)
    kept = await wait_for_result(temporal_client, foreign.workflow_id)
    objects = await wait_for_result(temporal_client, offload.workflow_id)
    assert (done.outcome, kept.outcome, objects.outcome) == (
        Outcome.DELETED,
        Outcome.SKIPPED_NOT_PULSAR,
        Outcome.DELETED,
    )

    store = AuditStore.from_settings(settings)
    records = read(store, AuditQuery(namespace=namespace))
    by_ledger = {r.ledger_id: r for r in records}
    assert sorted(by_ledger) == sorted([ids[0], foreign_id, offloaded_id])  # acked once, written once each
    record = by_ledger[ids[0]]
    description = await temporal_client.get_workflow_handle(deleted.workflow_id).describe()
    assert (record.workflow_id, record.run_id) == (deleted.workflow_id, description.run_id)
    assert (record.outcome, record.source, record.mode, record.worker) == (
        "DELETED",
        "broker",
        "live",
        service.ack_queue.rsplit("-ack-", 1)[1],
    )
    evidence = json.loads(record.evidence)
    assert evidence["verify_bk_metadata"]["verdict"] == "MATCH"
    assert evidence["verify_bk_metadata"]["znode_version"] >= 0
    assert evidence["verify_bk_metadata"]["tags"]["application"] == "pulsar"
    assert evidence["verify_bk_metadata"]["state"] == "CLOSED"
    assert evidence["ask_owner_broker"]["in_use"] is False
    assert evidence["delete_bk_ledger"]["status"] == "DELETED"
    assert record.deleted_at is not None and record.decided_at is not None
    assert record.bytes == done.bytes
    assert (by_ledger[foreign_id].outcome, by_ledger[foreign_id].source) == ("SKIPPED_NOT_PULSAR", "submit")
    # What a refusal rested on: another application's tag.
    foreign_tags = json.loads(by_ledger[foreign_id].evidence)["verify_bk_metadata"]["tags"]
    assert foreign_tags.get("application") not in (None, "pulsar")
    # An offload's objects: each key with its size and ETag as HEAD saw them before the delete.
    segment = by_ledger[offloaded_id]
    deleted_objects = json.loads(segment.evidence)["delete_offload_segment"]
    assert sorted(deleted_objects["etags"]) == sorted(segment.keys) == sorted(objects.deleted_keys)
    assert all(etag.strip('"') for etag in deleted_objects["etags"].values())
    assert sum(deleted_objects["sizes"].values()) == segment.bytes == objects.bytes > 0

    # The ingest's own dead letter (a payload that does not decode) has its record too: written by the
    # pulsar pool's next group commit before it acks, which nothing above waits for.
    garbage: list[AuditRecord] = []

    def recorded() -> None:
        dead = read(store, AuditQuery(outcome="DEAD_LETTERED"))
        garbage[:] = [r for r in dead if r.message_id == garbage_id]
        assert len(garbage) == 1

    await eventually(recorded, timeout=30)
    assert (garbage[0].failed_step, garbage[0].ledger_id) == ("decode", -1)

    # Reconcile's report marks a candidate by the service's latest live decision for its ledger.
    decided = audit_decisions(settings, Console(stderr=True))
    assert decided[("LEDGER", ids[0])].outcome == "DELETED"
    assert decided[("LEDGER", foreign_id)].outcome == "SKIPPED_NOT_PULSAR"

    # The operator's command: -o json carries each record's ledger id and outcome.
    env = {**os.environ, **stack.as_env(), "LEDGER_DELETION_AUDIT_PREFIX": settings.audit_prefix}
    shown = subprocess.run(
        [
            str(Path(sys.executable).parent / "ledger-deletion"),
            "audit",
            "--namespace",
            namespace,
            "--outcome",
            "DELETED",
            "-o",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    shown_records = sorted((r["ledger_id"], r["outcome"]) for r in json.loads(shown.stdout))
    assert shown_records == sorted([(ids[0], "DELETED"), (offloaded_id, "DELETED")])
