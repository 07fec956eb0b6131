"""The BK copy of an offloaded ledger the broker marked ``bookkeeperDeleted`` but failed to delete.

After ``managedLedgerOffloadDeletionLagMs`` the broker sets the ledger's OffloadContext
``bookkeeperDeleted=true`` in ManagedLedgerInfo (the ledger stays in the list: its data is read from tiered
storage), stores that, then deletes the BK ledger; when that delete fails for good the znode stays forever.
Written here by :class:`devstack.cluster.SimulatedCluster` (``bookkeeper_deleted`` writes no znode; the leak
is the znode written back afterwards, as the cluster writes a live ledger's) under a ZooKeeper chroot and
into a bucket of their own, then the whole job is run once for the module.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from ledger_deletion.formats.bk_metadata import (  # noqa: E402
    build_pulsar_ledger_metadata,
    managed_ledger_custom_metadata,
)
from ledger_deletion.formats.bk_paths import ledger_path  # noqa: E402
from ledger_deletion.request import LedgerComponent, LedgerType  # noqa: E402
from reconcile.extract import OFFLOAD_CONTEXTS, REFERENCES, ExtractConfig  # noqa: E402
from reconcile.job import FINDINGS_PARQUET, SUMMARY_JSON, JobConfig, run  # noqa: E402

pytestmark = [pytest.mark.stack, pytest.mark.spark, pytest.mark.timeout(900)]

# Spelled out (not imported): the test also has to say something on code that does not know the reason.
REASON = "bk-copy-of-offloaded-ledger"


@dataclass(frozen=True)
class Ids:
    leaked: int  # (a) complete + bookkeeperDeleted, znode still there: the only candidate
    leaked_topic: str
    in_lag: int  # (b) offloaded, bookkeeperDeleted=false, znode there: still the broker's
    live: int  # the leaked topic's current ledger
    leaked_cursor_ledger: int  # (c) leaked, but another topic's cursor ledger
    leaked_listed_twice: int  # (c) leaked, but another managed ledger lists it as data
    other: tuple[int, ...]  # the other topics' own ledgers


@dataclass(frozen=True)
class Scenario:
    ids: Ids
    result: Any
    objects: set[str]


def _write_leaked_znode(client: Any, ml_name: str, ledger_id: int) -> None:
    """The BK ledger the broker failed to delete: a closed data ledger with that managed ledger's tags."""
    data = build_pulsar_ledger_metadata(
        managed_ledger_custom_metadata(ml_name), length=100 * 1024, last_entry_id=99
    )
    path = ledger_path(ledger_id)
    if client.exists(path):
        client.set(path, data)
    else:
        client.create(path, data, makepath=True)


@pytest.fixture(scope="module")
def scenario(
    stack: Any, zk: Any, s3: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    from kazoo.client import KazooClient

    from devstack.cluster import SimulatedCluster

    tag = uuid.uuid4().hex[:10]
    chroot, bucket = f"/reconcile-offloaded-bk-{tag}", f"reconcile-offloaded-bk-{tag}"
    zk.ensure_path(chroot)
    s3.create_bucket(Bucket=bucket)
    client = KazooClient(hosts=stack.zookeeper + chroot)
    client.start()
    try:
        base = random.randrange(10**6, 2**31 - 10**7, 1000)
        ids = Ids(
            leaked=base + 1,
            leaked_topic=f"acme-{tag}/ns/orders",
            in_lag=base + 2,
            live=base + 3,
            leaked_cursor_ledger=base + 11,
            leaked_listed_twice=base + 21,
            other=(base + 12, base + 22),
        )
        cluster = SimulatedCluster(client, s3, bucket=bucket)
        # (a) + (b): the leak, an offloaded ledger still within the deletion lag, the current ledger.
        orders = cluster.create_topic(
            ids.leaked_topic,
            [ids.leaked, ids.in_lag, ids.live],
            offloaded={ids.leaked, ids.in_lag},
            bookkeeper_deleted={ids.leaked},
        )
        # (c) another topic's cursor ledger has the id of a leaked one.
        cursors = cluster.create_topic(
            f"acme-{tag}/ns/cursors",
            [ids.leaked_cursor_ledger],
            offloaded={ids.leaked_cursor_ledger},
            bookkeeper_deleted={ids.leaked_cursor_ledger},
        )
        cluster.create_topic(f"acme-{tag}/ns/holder", [ids.other[0]])
        cluster.add_cursor(
            f"acme-{tag}/ns/holder", "sub", ids.leaked_cursor_ledger, mark_delete=(ids.other[0], 0)
        )
        # (c) another managed ledger lists the id as data.
        twice = cluster.create_topic(
            f"acme-{tag}/ns/twice",
            [ids.leaked_listed_twice],
            offloaded={ids.leaked_listed_twice},
            bookkeeper_deleted={ids.leaked_listed_twice},
        )
        cluster.create_topic(f"acme-{tag}/ns/lister", [ids.leaked_listed_twice, ids.other[1]])
        for ml_name, ledger_id in (
            (orders.managed_ledger_name, ids.leaked),
            (cursors.managed_ledger_name, ids.leaked_cursor_ledger),
            (twice.managed_ledger_name, ids.leaked_listed_twice),
        ):
            _write_leaked_znode(client, ml_name, ledger_id)
        objects = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
        # Cut-off a second after everything was written: every ledger is old enough.
        now_ms = int(time.time() * 1000) + 1000
        config = JobConfig(
            extract=ExtractConfig(
                zookeeper=stack.zookeeper + chroot,
                s3_endpoint=stack.s3_endpoint,
                buckets=(bucket,),
                workers=1,
            ),
            out=tmp_path_factory.mktemp("reconcile-offloaded-bk"),
            now_ms=now_ms,
            min_age_seconds=0,
            master="local[2]",
        )
        yield Scenario(ids, run(config, spark=spark, s3_client=s3), objects)
    finally:
        client.stop()
        client.close()
        zk.delete(chroot, recursive=True)
        for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
        s3.delete_bucket(Bucket=bucket)


def _bk_findings(scenario: Scenario, spark: Any) -> dict[int, tuple[str, str | None]]:
    rows = spark.read.parquet(str(scenario.result.out / FINDINGS_PARQUET)).collect()
    return {r["ledger_id"]: (r["status"], r["reason"]) for r in rows if r["storage"] == "bookkeeper"}


def test_leaked_bk_copy_of_offloaded_ledger_is_the_one_candidate(scenario: Scenario, spark: Any) -> None:
    """(a) complete + bookkeeperDeleted, znode present, old enough: exactly one LEDGER request, for
    MANAGED_LEDGER with the managed ledger's topic; its offloaded objects are in use, never candidates."""
    ids, result = scenario.ids, scenario.result
    assert [(r.ledger_type, r.ledger_component, r.ledger_id, r.topic_name) for r in result.requests] == [
        (LedgerType.LEDGER, LedgerComponent.MANAGED_LEDGER, ids.leaked, ids.leaked_topic)
    ]
    (request,) = result.requests
    assert request.check_ledger_still_in_use is True and request.context is None
    assert result.rejected == []
    findings = spark.read.parquet(str(result.out / FINDINGS_PARQUET)).collect()
    assert [(r["storage"], r["ledger_id"], r["status"], r["reason"]) for r in findings] == [
        ("bookkeeper", ids.leaked, "candidate", REASON)
    ]  # no offload finding at all: every object is named by a surviving offload context
    assert scenario.objects  # there are objects, of the leaked ledger among others
    assert not any(r.ledger_type is LedgerType.OFFLOAD_LEDGER for r in result.requests)
    assert result.candidate_reasons == {REASON: (1, 100 * 1024)}
    summary = json.loads((Path(result.out) / SUMMARY_JSON).read_text())
    assert summary["candidate_reasons"] == {REASON: {"count": 1, "bytes": 100 * 1024}}


def test_extract_records_the_entry_apart_and_keeps_its_offload_context(
    scenario: Scenario, spark: Any
) -> None:
    """The reference kind says what the entry is; its offload context rows are those of any offload."""
    ids, result = scenario.ids, scenario.result
    kinds = {
        (r["ledger_id"], r["kind"])
        for r in spark.read.parquet(result.extract.path(REFERENCES)).collect()
        if r["kind"] in ("data", "offloaded-bk-deleted")
    }
    assert kinds == {
        (ids.leaked, "offloaded-bk-deleted"),
        (ids.in_lag, "data"),
        (ids.live, "data"),
        (ids.leaked_cursor_ledger, "offloaded-bk-deleted"),
        (ids.leaked_listed_twice, "offloaded-bk-deleted"),
        (ids.leaked_listed_twice, "data"),
        *((i, "data") for i in ids.other),
    }
    contexts = {
        r["ledger_id"]: (r["variant"], r["complete"])
        for r in spark.read.parquet(result.extract.path(OFFLOAD_CONTEXTS)).collect()
    }
    offloaded = (ids.leaked, ids.in_lag, ids.leaked_cursor_ledger, ids.leaked_listed_twice)
    assert contexts == {i: ("ledger", True) for i in offloaded}


def test_offloaded_ledger_within_the_deletion_lag_is_kept(scenario: Scenario, spark: Any) -> None:
    """(b) offloaded, bookkeeperDeleted=false, BK copy present: still the broker's, no finding at all."""
    ids = scenario.ids
    assert ids.in_lag not in _bk_findings(scenario, spark)
    assert ids.in_lag not in {r.ledger_id for r in scenario.result.requests}


def test_leaked_copy_that_another_reference_lists_is_kept(scenario: Scenario, spark: Any) -> None:
    """(c) the id is also another topic's cursor ledger, or another managed ledger's data: kept."""
    ids = scenario.ids
    findings = _bk_findings(scenario, spark)
    for ledger_id in (ids.leaked_cursor_ledger, ids.leaked_listed_twice):
        assert ledger_id not in findings
        assert ledger_id not in {r.ledger_id for r in scenario.result.requests}
