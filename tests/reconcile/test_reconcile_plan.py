"""The reconcile's physical plans and its streamed outputs, on generated extract tables (no ZooKeeper, S3).

The tables come from ``devstack.extract_tables`` (the benchmark's Spark-only clusters), small here. The S3
HEADs of the offload candidates are answered by that generator's ``head_owners`` (what its objects would
carry): the HEAD path itself runs against S3 in test_reconcile_job.py; what is checked here is Spark's part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import LongType  # noqa: E402

from devstack import extract_tables  # noqa: E402
from ledger_deletion.request import LedgerComponent, LedgerType  # noqa: E402
from reconcile import transform as T  # noqa: E402
from reconcile.extract import (  # noqa: E402
    SCHEMAS,
    ExtractConfig,  # noqa: E402
    ExtractResult,
)
from reconcile.job import (  # noqa: E402
    CANDIDATES_AVRO,
    CANDIDATES_JSONL,
    JobConfig,
    read_tables,
    run,
)
from reconcile.plans import executed_plan, forbidden_operators, join_operators  # noqa: E402

pytestmark = pytest.mark.spark

LEDGERS = 4096
NOW_MS = 1_800_000_000_000
MIN_AGE_S = 3600


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> ExtractResult:
    directory = tmp_path_factory.mktemp("extract")
    written = extract_tables.write_extract_tables(directory, LEDGERS, now_ms=NOW_MS)
    # The generator's bk_ledgers holds unreferenced ledgers only, so the anti-join's other side would be
    # empty and adaptive execution would drop the join. The extract also reads the metadata of listed
    # ledgers whose id names unkept objects, referenced ones among them: add such rows (ids 1-64, all
    # referenced data ledgers or cursors), which the anti-join has to take out.
    bk = pq.read_table(directory / "bk_ledgers")
    referenced = set(pq.read_table(directory / "references").column("ledger_id").to_pylist())
    present = set(bk.column("ledger_id").to_pylist())
    ids = [i for i in range(1, 65) if i in referenced and i not in present]
    extra = bk.slice(0, 1).take([0] * len(ids)).set_column(0, "ledger_id", pa.array(ids, pa.int64()))
    pq.write_table(extra, directory / "bk_ledgers" / "part-referenced.parquet")
    return ExtractResult(
        directory, rows={**written.rows, "bk_ledgers": written.rows["bk_ledgers"] + len(ids)}
    )


def test_generated_tables_have_the_extracts_schemas() -> None:
    # The generator keeps its own copy (devstack imports nothing of reconcile): it must not drift.
    assert extract_tables.SCHEMAS == SCHEMAS


def _ran(df: Any) -> str:
    plan = executed_plan(df)
    assert "isFinalPlan=true" in plan or "AdaptiveSparkPlan" not in plan, plan  # the plan that ran
    return plan


def test_main_anti_join_is_an_equi_join_without_python(spark: Any, extracted: ExtractResult) -> None:
    tables = read_tables(spark, extracted)
    plan = _ran(T.unreferenced_bk(tables.bk, tables.refs, tables.ctxs))
    # What ran (the final plan): the join is there, the referenced rows had to be taken out.
    anti = [op for op, kind in join_operators(plan) if kind == "LeftAnti"]
    assert anti, plan
    assert set(anti) <= {"BroadcastHashJoin", "SortMergeJoin", "ShuffledHashJoin"}, plan
    assert forbidden_operators(plan) == [], plan


def test_no_cartesian_product_or_python_udf_on_the_hot_path(spark: Any, extracted: ExtractResult) -> None:
    tables = read_tables(spark, extracted)
    raw = T.bk_findings(tables.bk, tables.refs, tables.ctxs, cutoff_ms=NOW_MS).unionByName(
        T.offload_findings(tables.objs, tables.refs, tables.ctxs, cutoff_ms=NOW_MS)
    )
    owners = spark.createDataFrame([], T.OFFLOAD_OWNERS_SCHEMA)
    findings = T.unknown_namespaces(
        T.attach_offload_owners(raw, owners, tables.bk, tables.refs),
        tables.namespaces,
        T.NAMESPACE_UNKNOWN_REASON,
    )
    for stage in (
        raw,
        findings,
        T.summarize(findings),
        T.shared_bookkeeper_evidence(findings, tables.namespaces, recent_from_ms=0),
    ):
        plan = _ran(stage)
        assert forbidden_operators(plan) == [], plan
        # The joins were seen (planned: a stage whose rows come out empty runs none): the text is read.
        assert join_operators(plan, final=False), plan


def test_the_check_sees_a_cartesian_product_and_a_python_udf(spark: Any, extracted: ExtractResult) -> None:
    # The check above proves nothing if it cannot see what it forbids: here is each of them, on purpose.
    tables = read_tables(spark, extracted)
    ids = tables.bk.select("ledger_id")
    cross = ids.crossJoin(ids.select(F.col("ledger_id").alias("other")))  # no key at all
    # Spark runs it as one or the other, by the sizes.
    assert {"CartesianProduct", "BroadcastNestedLoopJoin"} & set(forbidden_operators(_ran(cross)))
    non_equi = ids.join(
        ids.select(F.col("ledger_id").alias("other")), F.col("ledger_id") < F.col("other"), "left_anti"
    )
    assert "BroadcastNestedLoopJoin" in forbidden_operators(_ran(non_equi))
    udf = F.udf(lambda x: x + 1, LongType(), useArrow=False)  # a plain Python UDF: no pandas here
    assert "BatchEvalPython" in forbidden_operators(_ran(ids.select(udf("ledger_id"))))


def test_job_streams_exactly_the_generated_candidates(
    spark: Any, extracted: ExtractResult, tmp_path: Path
) -> None:
    config = JobConfig(
        extract=ExtractConfig(zookeeper="unused:2181"), out=tmp_path, min_age_seconds=MIN_AGE_S, now_ms=NOW_MS
    )
    result = run(config, spark=spark, extracted=extracted, head=extract_tables.head_owners)
    truth = extract_tables.truth(LEDGERS)
    requests = result.requests
    by = {
        kind: sorted(r.ledger_id for r in requests if pick(r))
        for kind, pick in {
            "data": lambda r: (
                r.ledger_component is LedgerComponent.MANAGED_LEDGER and r.ledger_type is LedgerType.LEDGER
            ),
            "cursor": lambda r: r.ledger_component is LedgerComponent.MANAGED_CURSOR,
            "offload": lambda r: r.ledger_type is LedgerType.OFFLOAD_LEDGER,
        }.items()
    }
    assert by == {kind: ids.tolist() for kind, ids in truth.items()}
    assert result.candidates == len(requests) == sum(len(ids) for ids in truth.values())
    assert result.rejected == []
    # The files are in request order (type, then id), as the collected list used to be sorted.
    assert [(r.ledger_type.value, r.ledger_id) for r in requests] == sorted(
        (r.ledger_type.value, r.ledger_id) for r in requests
    )
    import fastavro

    with (tmp_path / CANDIDATES_AVRO).open("rb") as avro:
        assert sum(1 for _ in fastavro.reader(avro)) == result.candidates
    assert len((tmp_path / CANDIDATES_JSONL).read_text().splitlines()) == result.candidates
    copies = sum(1 for t in range(LEDGERS // extract_tables.BLOCK) if t % 64 == 13)
    assert {k: count for k, (count, _bytes) in result.candidate_reasons.items()} == {
        T.BK_COPY_OF_OFFLOADED_REASON: copies
    }
