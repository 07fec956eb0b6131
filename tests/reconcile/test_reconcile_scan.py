"""The extract's BK scan on the embedded stack's real ZooKeeper: what it costs the server, and its safety.

The ledger ids are listed, the references read, and metadata read only for the unreferenced ledgers, in
multi-reads; the full read (every ledger's metadata, one request per znode) stays selectable and is the
yardstick. Each cluster lives under a chroot and in a bucket of its own.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from devstack import ports
from devstack.generator import ClusterSpec, plan_cluster, write_plan
from devstack.stack import Stack, StackPorts, default_state_dir
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import (
    ManagedLedgerInfo,
    parse_managed_ledger_info,
    serialize_managed_ledger_info,
)
from ledger_deletion.request import LedgerType
from reconcile.extract import (
    BK_LEDGER_IDS,
    BK_LEDGERS,
    OFFLOAD_OBJECTS,
    ExtractConfig,
    ExtractResult,
    extract_all,
)

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

FULL_READ = {"bk_metadata": "all", "multi_read": False}  # the extract before the id listing


@pytest.fixture(scope="module")
def private_zookeeper() -> Iterator[str]:
    """A ZooKeeper of this module's own: the request counts below are the server's (``mntr``), and on the
    shared stack's every other test running meanwhile (other xdist workers) adds to them."""
    state_dir = Path(
        os.environ.get(
            "LEDGER_DELETION_RECONCILE_ZK_STACK_DIR", str(default_state_dir().with_name("reconcile-scan-zk"))
        )
    )
    private = Stack(state_dir, StackPorts(zookeeper=ports.block(ports.RECONCILE_SCAN_ZK).zookeeper))
    was_running = private.pid("zookeeper") is not None
    private.up(install=False, only=("zookeeper",))
    yield private.endpoints().zookeeper
    if not was_running:
        private.down()


@pytest.fixture(scope="module")
def scan_zk(private_zookeeper: str) -> Iterator[Any]:
    client = KazooClient(hosts=private_zookeeper)
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def cluster(private_zookeeper: str, stack: Any, scan_zk: Any, s3: Any) -> Iterator[dict[str, Any]]:
    """A generated cluster of 3,000 ledgers (orphans of every kind among them) and its ground truth, in
    this module's own ZooKeeper."""
    tag = uuid.uuid4().hex[:10]
    chroot, bucket = f"/reconcile-scan-{tag}", f"reconcile-scan-{tag}"
    scan_zk.ensure_path(chroot)
    s3.create_bucket(Bucket=bucket)
    spec = ClusterSpec(
        ledgers=3000,
        bucket=bucket,
        seed=33,
        offloading_fraction=0.1,
        first_ledger_id=random.randrange(10**6, 2**31 - 10**7, 1000),
        first_long_ledger_id=2**32 + random.randrange(0, 2**40, 1000),
    )
    plan = plan_cluster(spec)
    client = KazooClient(hosts=private_zookeeper + chroot)
    client.start()
    write_plan(client, s3, plan, bucket=bucket)
    client.stop()
    client.close()
    yield {
        "config": ExtractConfig(
            zookeeper=private_zookeeper + chroot, s3_endpoint=stack.s3_endpoint, buckets=(bucket,), workers=2
        ),
        "truth": plan.truth,
        "ledgers": len(plan.ledgers),
        "now_ms": int(time.time() * 1000) + 1000,  # every generated ledger is old enough
    }
    scan_zk.delete(chroot, recursive=True)
    objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    while objects:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in objects]})
        objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    s3.delete_bucket(Bucket=bucket)


def _packets_received(scan_zk: Any) -> int:
    """What the ZooKeeper server has received so far (``mntr``), as the server counts it."""
    for line in scan_zk.command(b"mntr").splitlines():
        key, _, value = line.partition("\t")
        if key == "zk_packets_received":
            return int(value)
    raise AssertionError("mntr has no zk_packets_received")


def _counted_extract(zk: Any, config: ExtractConfig, out: Path) -> tuple[int, ExtractResult]:
    before = _packets_received(zk)
    result = extract_all(config, out)
    return _packets_received(zk) - before, result


def test_zookeeper_requests_per_ledger_fall_to_a_third_of_the_full_read(
    cluster: dict[str, Any], scan_zk: Any, tmp_path: Path
) -> None:
    """Counted by the server, this module's own: its count also holds whatever else the module runs
    meanwhile (it can only grow), so each way runs twice and the smaller count is taken. The client's own
    count of what it sent must show the same, and the server must have received at least that."""
    full_config = replace(cluster["config"], **FULL_READ)
    runs: dict[str, list[tuple[int, ExtractResult]]] = {"full": [], "new": []}
    for round_ in range(2):
        runs["full"].append(_counted_extract(scan_zk, full_config, tmp_path / f"full-{round_}"))
        runs["new"].append(_counted_extract(scan_zk, cluster["config"], tmp_path / f"new-{round_}"))

    server = {way: min(count for count, _ in done) for way, done in runs.items()}
    client = {way: sum(done[0][1].zk_requests.values()) for way, done in runs.items()}
    ledgers = runs["full"][0][1].rows[BK_LEDGER_IDS]
    assert ledgers == cluster["ledgers"]
    assert runs["full"][0][1].rows[BK_LEDGERS] == ledgers  # the full read: every ledger's metadata
    assert runs["new"][0][1].rows[BK_LEDGERS] < ledgers / 10  # the new one: the unreferenced ones only
    assert client["full"] >= ledgers  # at least one request per ledger
    assert server["full"] >= client["full"] and server["new"] >= client["new"]
    assert server["new"] / ledgers <= 0.35 * server["full"] / ledgers, (server, client)
    assert client["new"] <= 0.35 * client["full"], (server, client)


@pytest.mark.spark
def test_candidates_and_findings_are_those_of_the_full_read(
    cluster: dict[str, Any], spark: Any, s3: Any, tmp_path: Path
) -> None:
    from reconcile.job import FINDINGS_PARQUET, JobConfig, run

    results = {}
    for way, config in (("full", replace(cluster["config"], **FULL_READ)), ("new", cluster["config"])):
        job = JobConfig(
            extract=config, out=tmp_path / way, now_ms=cluster["now_ms"], min_age_seconds=0, master="local[2]"
        )
        results[way] = run(job, spark=spark, s3_client=s3)

    truth = cluster["truth"]
    requested = {
        r.ledger_id: r.ledger_component.value
        for r in results["new"].requests
        if r.ledger_type is LedgerType.LEDGER
    }
    assert requested == truth.bk_candidates
    assert results["new"].requests == results["full"].requests
    findings = {
        way: sorted(spark.read.parquet(str(tmp_path / way / FINDINGS_PARQUET)).collect(), key=repr)
        for way in results
    }
    assert len(findings["new"]) > len(truth.bk_candidates)  # report-only and excluded ones too
    assert findings["new"] == findings["full"]


def _write_ledger(client: KazooClient, ledger_id: int, ml_name: str) -> None:
    data = build_pulsar_ledger_metadata(managed_ledger_custom_metadata(ml_name), length=100, last_entry_id=9)
    client.create(ledger_path(ledger_id, "/ledgers"), data, makepath=True)


@pytest.mark.spark
def test_a_ledger_created_between_the_id_listing_and_the_reference_scan_is_never_a_candidate(
    private_zookeeper: str,
    scan_zk: Any,
    spark: Any,
    s3: Any,
    new_ledger_id: Callable[[], int],
    tmp_path: Path,
) -> None:
    """What a broker does while the extract runs: it creates a ledger, then stores the ledger list naming it
    (``ManagedLedgerImpl.createComplete`` -> ``updateLedgersListAfterRollover``). Between the id listing and
    the reference scan, ``listed_then_used`` (created before the listing) enters the topic's list and
    ``created`` is created. Neither may be a candidate, even with no minimum age; an orphan created before
    the extract is one, so the setting does make unreferenced ledgers candidates."""
    from reconcile.job import JobConfig, run

    chroot = f"/reconcile-order-{uuid.uuid4().hex[:10]}"
    scan_zk.ensure_path(chroot)
    ml_name = "public/default/persistent/orders"
    # Below ``in_use``: ledgers newer than everything listed are kept anyway (newer-than-listed), which would
    # hide the order this test is about.
    orphan, listed_then_used, in_use, created = (new_ledger_id() for _ in range(4))
    client = KazooClient(hosts=private_zookeeper + chroot)
    client.start()
    try:
        info = ManagedLedgerInfo()
        info.ledgerInfo.add(ledgerId=in_use, entries=10, size=100, timestamp=1)
        client.create(f"/managed-ledgers/{ml_name}", serialize_managed_ledger_info(info), makepath=True)
        for ledger_id in (in_use, listed_then_used, orphan):
            _write_ledger(client, ledger_id, ml_name)
        stages: list[str] = []

        def broker_meanwhile(stage: str, done: int, _total: int) -> None:
            if stage == OFFLOAD_OBJECTS and done == 0:  # the ids are listed, no reference is read yet
                stages.append(stage)
                _write_ledger(client, created, ml_name)
                data, stat = client.get(f"/managed-ledgers/{ml_name}")
                updated = parse_managed_ledger_info(data)
                updated.ledgerInfo.add(ledgerId=listed_then_used, entries=0, size=0, timestamp=2)
                client.set(
                    f"/managed-ledgers/{ml_name}", serialize_managed_ledger_info(updated), stat.version
                )

        config = ExtractConfig(zookeeper=private_zookeeper + chroot, workers=1)
        extracted = extract_all(config, tmp_path / "extract", progress=broker_meanwhile)
        job = JobConfig(
            extract=config,
            out=tmp_path,
            now_ms=int(time.time() * 1000) + 1000,
            min_age_seconds=0,
            master="local[2]",
        )
        result = run(job, spark=spark, s3_client=s3, extracted=extracted)
    finally:
        client.stop()
        client.close()
        scan_zk.delete(chroot, recursive=True)

    assert stages == [OFFLOAD_OBJECTS]
    listed = {row["ledger_id"] for row in spark.read.parquet(extracted.path(BK_LEDGER_IDS)).collect()}
    assert listed == {in_use, listed_then_used, orphan}  # ``created`` came after the listing
    assert {r.ledger_id for r in result.requests} == {orphan}
