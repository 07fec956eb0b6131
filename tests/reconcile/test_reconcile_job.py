"""The whole job on the embedded stack's real ZooKeeper and S3: candidates are exactly the generated orphans.

The cluster is written under a ZooKeeper chroot and into a bucket of its own, so nothing else in ZooKeeper or
S3 (other tests, the demo) is seen, and nothing of ours is seen by others.
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

pytest.importorskip("pyspark")

from devstack.generator import ClusterSpec, plan_cluster, plan_young_orphans, write_plan  # noqa: E402
from ledger_deletion.formats.offload_keys import ledger_object_keys, offload_uuid  # noqa: E402
from ledger_deletion.request import LedgerType  # noqa: E402
from ledger_deletion.submit import LineError, parse_jsonl  # noqa: E402
from reconcile.extract import ExtractConfig  # noqa: E402
from reconcile.job import JobConfig, run  # noqa: E402

# Setup (SparkSession start, cluster generation, the whole job) takes ~1 min, several on a loaded machine.
pytestmark = [pytest.mark.stack, pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(stack: Any, zk: Any, s3: Any) -> Iterator[dict[str, Any]]:
    tag = uuid.uuid4().hex[:10]
    chroot, bucket = f"/reconcile-test-{tag}", f"reconcile-test-{tag}"
    zk.ensure_path(chroot)
    s3.create_bucket(Bucket=bucket)
    from kazoo.client import KazooClient

    client = KazooClient(hosts=stack.zookeeper + chroot)
    client.start()
    # Ledger ids of their own: the service's workflow ids derive from them, and must not meet earlier runs.
    spec = ClusterSpec(
        ledgers=400,
        bucket=bucket,
        seed=42,
        first_ledger_id=random.randrange(10**6, 2**31 - 10**7, 1000),
        first_long_ledger_id=2**32 + random.randrange(0, 2**40, 1000),
    )
    plan = plan_cluster(spec)
    young = plan_young_orphans(spec, plan)  # also turns one old OPEN orphan into a "recently modified" one
    write_plan(client, s3, plan, bucket=bucket)
    old_done_ms = int(time.time() * 1000)
    # S3 LastModified has second precision: write the young ones in a later second than the cut-off.
    cutoff_ms = old_done_ms + 1
    time.sleep(math.ceil(cutoff_ms / 1000) - cutoff_ms / 1000 + 0.2)
    write_plan(client, s3, young, bucket=bucket)
    client.stop()
    client.close()
    plan.truth.merge(young.truth)
    yield {
        "chroot": chroot,
        "bucket": bucket,
        "truth": plan.truth,
        "cutoff_ms": cutoff_ms,
        "stack": stack,
        "ledger_ids": {i for i, _ in plan.ledgers + young.ledgers},
        "object_keys": {k for k, _, _ in plan.objects + young.objects},
    }
    zk.delete(chroot, recursive=True)
    objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    while objects:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in objects]})
        objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    s3.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def result(cluster: dict[str, Any], spark: Any, s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    stack = cluster["stack"]
    config = JobConfig(
        extract=ExtractConfig(
            zookeeper=stack.zookeeper + cluster["chroot"],
            s3_endpoint=stack.s3_endpoint,
            buckets=(cluster["bucket"],),
            workers=2,
        ),
        out=tmp_path_factory.mktemp("reconcile-out"),
        now_ms=cluster["cutoff_ms"],
        min_age_seconds=0,
        master="local[2]",
    )
    return run(config, spark=spark, s3_client=s3)


def test_candidates_are_exactly_the_orphans(cluster: dict[str, Any], result: Any) -> None:
    truth = cluster["truth"]
    ledgers = {
        r.ledger_id: r.ledger_component.value for r in result.requests if r.ledger_type is LedgerType.LEDGER
    }
    offloads = {
        (offload_uuid(r.context.offload_context.uid_msb, r.context.offload_context.uid_lsb), r.ledger_id)
        for r in result.requests
        if r.ledger_type is LedgerType.OFFLOAD_LEDGER
    }
    assert ledgers == truth.bk_candidates  # none missed, none extra, every component right
    assert offloads == truth.offload_candidates
    assert not set(ledgers) & truth.referenced
    assert not set(ledgers) & set(truth.excluded_ledgers)
    assert result.rejected == []
    # Every kind is present in the generated cluster, so "exactly" means something.
    assert set(truth.bk_candidates.values()) == {"MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE"}
    assert any(i >= 2**32 for i in truth.bk_candidates)
    assert set(truth.excluded_ledgers.values()) >= {
        "not-pulsar",
        "no-application-tag",
        "unparseable-metadata",
        "too-young",
        "open-recently-modified",
    }


def test_requests_carry_owner_and_context(cluster: dict[str, Any], result: Any) -> None:
    replaced = cluster["truth"].replaced_offloads
    for request in result.requests:
        assert request.check_ledger_still_in_use is True
        if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
            ctx = request.context.offload_context
            assert ctx.driver_metadata.name == "aws-s3" and ctx.driver_metadata.properties["bucket"]
            # A replaced attempt was a failed one: its request says so, as the broker's would.
            assert ctx.complete is (
                (offload_uuid(ctx.uid_msb, ctx.uid_lsb), request.ledger_id) not in replaced
            )
            assert request.context.ledger_id == request.ledger_id
        elif request.ledger_component.value == "MANAGED_CURSOR":
            assert request.cursor_name
        elif request.ledger_component.value == "SCHEMA_STORAGE":
            assert request.schema_id == request.topic_name


def test_findings_report_only_and_excluded(cluster: dict[str, Any], result: Any, spark: Any) -> None:
    truth = cluster["truth"]
    findings = spark.read.parquet(str(result.out / "findings.parquet")).collect()
    report_only_ledgers = {
        r["ledger_id"] for r in findings if r["storage"] == "bookkeeper" and r["status"] == "report-only"
    }
    report_only_keys = {
        k for r in findings if r["storage"] == "offload" and r["status"] == "report-only" for k in r["keys"]
    }
    excluded_ledgers = {
        r["ledger_id"]: r["reason"]
        for r in findings
        if r["storage"] == "bookkeeper" and r["status"] == "excluded"
    }
    excluded_keys = {
        k: r["reason"]
        for r in findings
        if r["storage"] == "offload" and r["status"] == "excluded"
        for k in r["keys"]
    }
    assert report_only_ledgers == truth.report_only_ledgers
    assert report_only_keys == truth.report_only_objects
    assert excluded_ledgers == truth.excluded_ledgers
    assert excluded_keys == truth.excluded_objects
    young_offloads = {k for k, why in truth.excluded_objects.items() if why == "too-young"}
    assert young_offloads  # the young offload orphan really was seen, and kept


def test_output_files(result: Any) -> None:
    out: Path = result.out
    with (out / "candidates.jsonl").open(encoding="utf-8") as candidates:
        lines = list(parse_jsonl(candidates))
    assert [item for _, item in lines if isinstance(item, LineError)] == []
    assert [item for _, item in lines] == result.requests  # the exact shape `ledger-deletion submit` reads
    with (out / "candidates.avro").open("rb") as f:
        records: list[Any] = list(fastavro.reader(f))
    assert [(r["ledgerType"], r["ledgerId"]) for r in records] == [
        (r.ledger_type.value, r.ledger_id) for r in result.requests
    ]
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == len(result.requests)
    assert summary["totals"]["candidate"]["count"] == len(result.requests)


def test_legacy_tagged_orphans_are_reported_not_submitted(cluster: dict[str, Any], result: Any) -> None:
    """The generated legacy-tagged orphans (psr/..., schemaId, compactedTopic) would all end
    SKIPPED_METADATA_MISMATCH: none is a request, and the operator is shown each of them."""
    truth = cluster["truth"]
    requested = {r.ledger_id for r in result.requests if r.ledger_type is LedgerType.LEDGER}
    listed = {r["ledger_id"]: r["component"] for r in result.legacy_tagged}
    assert sorted(listed.values()) == ["compacted", "cursor", "data", "schema"]
    assert set(listed) <= truth.report_only_ledgers
    assert not set(listed) & requested
    assert result.report_only["legacy-tags-not-accepted"][0] == len(listed)
    summary = json.loads((result.out / "summary.json").read_text())
    assert summary["report_only"]["legacy-tags-not-accepted"]["count"] == len(listed)
    assert {r["ledger_id"] for r in summary["legacy_tagged"]} == set(listed)


def test_untagged_offloads_are_reported_not_submitted(cluster: dict[str, Any], result: Any) -> None:
    """The generated pair offloaded before apache/pulsar#14907 (no ManagedLedgerName, no role) has its owner
    only from the BK ledger's tag: the service would end its request SKIPPED_METADATA_MISMATCH, so it is
    report-only, and the operator is shown its keys; its BK copy is still submitted."""
    from reconcile.job import REPORT_ONLY_WHY

    truth = cluster["truth"]
    listed = result.unproven_offloads
    assert [r["reason"] for r in listed] == ["objects-untagged"]
    (pair,) = listed
    assert set(pair["keys"]) <= truth.report_only_objects and len(pair["keys"]) == 2
    assert pair["topic_name"]  # told by the BK tag, which names it but proves nothing for the objects
    offloads = {r.ledger_id for r in result.requests if r.ledger_type is LedgerType.OFFLOAD_LEDGER}
    ledgers = {r.ledger_id for r in result.requests if r.ledger_type is LedgerType.LEDGER}
    assert pair["ledger_id"] not in offloads
    assert pair["ledger_id"] in ledgers  # the BK copy's own tags are the ones the service accepts
    assert result.report_only["objects-untagged"] == (1, pair["bytes"])
    summary = json.loads((result.out / "summary.json").read_text())
    assert summary["report_only"]["objects-untagged"] == {
        "count": 1,
        "bytes": pair["bytes"],
        "why": REPORT_ONLY_WHY["objects-untagged"],
    }
    assert summary["unproven_offloads"] == [{**pair, "keys": list(pair["keys"])}]
    # The other untagged pair has no BK ledger either: its owner stays unknown, that reason comes first.
    assert result.report_only["owner-unknown"][0] == 1


def test_offload_keys_of_requests_exist(cluster: dict[str, Any], result: Any, s3: Any) -> None:
    """What the service will delete for an OFFLOAD_LEDGER request is exactly the orphan's objects."""
    for request in result.requests:
        if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
            ctx = request.context.offload_context
            for key in ledger_object_keys(offload_uuid(ctx.uid_msb, ctx.uid_lsb), request.ledger_id):
                s3.head_object(Bucket=cluster["bucket"], Key=key)


def test_extract_resumes_from_the_parts_it_has(cluster: dict[str, Any], tmp_path: Path) -> None:
    from reconcile.extract import BK_LEDGER_IDS, BK_LEDGERS, OFFLOAD_OBJECTS, REFERENCES, extract_all

    config = ExtractConfig(
        zookeeper=cluster["stack"].zookeeper + cluster["chroot"],
        s3_endpoint=cluster["stack"].s3_endpoint,
        buckets=(cluster["bucket"],),
        workers=1,
    )
    first = extract_all(config, tmp_path)
    assert first.skipped_units == {BK_LEDGER_IDS: 0, OFFLOAD_OBJECTS: 0, REFERENCES: 0, BK_LEDGERS: 0}
    parts = sorted((tmp_path / BK_LEDGER_IDS).glob("part-*.parquet"))
    parts[0].unlink()  # as if the extract had been interrupted there
    again = extract_all(config, tmp_path, resume=True)
    assert again.skipped_units[BK_LEDGER_IDS] == first.units[BK_LEDGER_IDS] - 1
    assert again.skipped_units[OFFLOAD_OBJECTS] == first.units[OFFLOAD_OBJECTS]
    # References, and the metadata of the ledgers they leave unreferenced, are always read again.
    assert again.skipped_units[REFERENCES] == again.skipped_units[BK_LEDGERS] == 0
    assert again.rows == first.rows
    assert first.rows[BK_LEDGER_IDS] == len(cluster["ledger_ids"])


def _existing(cluster: dict[str, Any], zk: Any, s3: Any) -> tuple[set[int], set[str]]:
    from ledger_deletion.formats.bk_paths import ledger_path

    root = cluster["chroot"] + "/ledgers"
    ledgers = {i for i in cluster["ledger_ids"] if zk.exists(ledger_path(i, root))}
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=cluster["bucket"]):
        keys |= {o["Key"] for o in page.get("Contents", [])}
    return ledgers, keys


async def test_submitted_candidates_are_deleted_and_nothing_else(
    cluster: dict[str, Any], result: Any, settings: Any, temporal_client: Any, zk: Any, s3: Any
) -> None:
    """End to end: publish the candidates, run the service on them; exactly the orphans disappear.

    Runs last in this module (it deletes from the generated cluster). The service sees the cluster through the
    same chroot and bucket; every request goes through all of its checks (topic, BK metadata match, ...).
    """
    import asyncio

    from ledger_deletion.contracts import Outcome
    from ledger_deletion.submit import publish_requests
    from tests.support import running_pools, wait_for_result

    tag = uuid.uuid4().hex[:8]
    service_settings = settings.with_overrides(
        zookeeper=cluster["stack"].zookeeper + cluster["chroot"],
        offload_bucket=cluster["bucket"],
        topic=f"persistent://pulsar/system/__ledger_deletion_reconcile_{tag}",
        task_queue_prefix=f"ld-reconcile-{tag}",
    )
    ledgers_before, keys_before = _existing(cluster, zk, s3)
    assert ledgers_before == cluster["ledger_ids"] and keys_before == cluster["object_keys"]
    async with running_pools(service_settings, temporal_client):
        published = await asyncio.to_thread(publish_requests, service_settings, result.requests, False)
        assert published == len(result.requests)
        outcomes = await asyncio.gather(
            *(wait_for_result(temporal_client, r.workflow_id, timeout=150) for r in result.requests)
        )
    # Every request is deleted: reconcile leaves out what the service would keep (newer than listed, in an
    # unknown namespace), so nothing it submits ends in a dead letter.
    assert {o.outcome for o in outcomes} == {Outcome.DELETED}, [
        o for o in outcomes if o.outcome != Outcome.DELETED
    ][:3]
    deleted_ledgers = {r.ledger_id for r in result.requests if r.ledger_type is LedgerType.LEDGER}
    deleted_keys = {
        key
        for r in result.requests
        if r.ledger_type is LedgerType.OFFLOAD_LEDGER
        for key in ledger_object_keys(
            offload_uuid(r.context.offload_context.uid_msb, r.context.offload_context.uid_lsb), r.ledger_id
        )
    }
    ledgers_after, keys_after = _existing(cluster, zk, s3)
    assert ledgers_after == ledgers_before - deleted_ledgers
    assert keys_after == keys_before - deleted_keys
