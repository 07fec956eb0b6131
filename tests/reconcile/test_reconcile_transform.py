"""The pure transforms, on hand-made DataFrames (no ZooKeeper, no S3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from reconcile import transform as T  # noqa: E402

pytestmark = pytest.mark.spark

CUTOFF = 1_000_000
OLD, YOUNG = CUTOFF - 5_000, CUTOFF + 5_000
ML = "public/default/persistent/orders-partition-1"
UUID_A = "3f2a8c1e-9b7d-4e21-a5c3-0d9e8f7a6b5c"
UUID_B = "11111111-2222-4333-8444-555555555555"
UUID_C = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
SCHEMA = "public/default/orders"


def ledger(ledger_id: int, custom: dict[str, str] | None, **over: Any) -> dict[str, Any]:
    tags = custom or {}
    row: dict[str, Any] = {
        "ledger_id": ledger_id,
        "path": f"/ledgers/00/0000/L{ledger_id:04d}",
        "format_version": 3,
        "application": tags.get("application"),
        "component": tags.get("component"),
        "managed_ledger": tags.get("pulsar/managed-ledger"),
        "cursor_name": tags.get("pulsar/cursor"),
        "schema_id": tags.get("pulsar/schemaId"),
        "compacted_topic": tags.get("pulsar/compactedTopic"),
        "custom": tags,
        "length": 100 * ledger_id,
        "state": "CLOSED",
        "ctime_ms": OLD,
        "mtime_ms": OLD,
        "md_ctime_ms": None,
        "parse_error": None,
    }
    row.update(over)
    return row


def data_tags(ml: str = ML) -> dict[str, str]:
    return {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ml}


def frames(
    spark: Any,
    bk: list[dict[str, Any]],
    refs: Sequence[tuple[Any, ...]] = (),
    ctxs: Sequence[tuple[Any, ...]] = (),
    objs: Sequence[tuple[Any, ...]] = (),
) -> tuple[Any, Any, Any, Any]:
    return (
        spark.createDataFrame(bk, T.BK_LEDGERS_SCHEMA),
        # Every reference from our own store unless a test says which (a fifth field).
        spark.createDataFrame([(*r, "ours")[:5] for r in refs], T.REFERENCES_SCHEMA),
        spark.createDataFrame(list(ctxs), T.OFFLOAD_CONTEXTS_SCHEMA),
        spark.createDataFrame(list(objs), T.OFFLOAD_OBJECTS_SCHEMA),
    )


def by_id(df: Any) -> dict[int, tuple[str, str | None]]:
    return {r["ledger_id"]: (r["status"], r["reason"]) for r in df.collect()}


def test_bk_findings_classify_and_apply_every_safety_rule(spark: Any) -> None:
    bk, refs, ctxs, _ = frames(
        spark,
        [
            ledger(1, data_tags()),  # referenced by the ledger list
            ledger(2, data_tags()),  # referenced only as a cursor ledger of another owner: still referenced
            ledger(3, data_tags()),  # referenced only through an offload context
            ledger(10, data_tags()),
            ledger(11, {**data_tags(), "pulsar/cursor": "my-sub"}),
            ledger(
                12,
                {"application": "pulsar", "component": "schema", "pulsar/schemaId": "public/default/orders"},
            ),
            ledger(
                13,
                {
                    "application": "pulsar",
                    "component": "compacted-ledger",
                    "pulsar/compactedTopic": "persistent://public/default/orders",
                },
            ),
            ledger(14, {"application": "bookkeeper-table-service"}),
            ledger(15, None),
            ledger(16, None, format_version=None, parse_error="not BookKeeper ledger metadata"),
            ledger(17, data_tags(), ctime_ms=YOUNG, mtime_ms=YOUNG),
            ledger(18, data_tags(), md_ctime_ms=YOUNG),  # metadata ctime is later than the znode's: young
            ledger(19, data_tags(), state="OPEN", mtime_ms=YOUNG),
            ledger(20, data_tags(), state="OPEN"),  # old and untouched: a candidate like any other
            ledger(21, data_tags("public/default/persistent/broken")),  # owner record unreadable
            ledger(22, {"application": "pulsar", "component": "managed-ledger", "psr/managed-ledger": ML}),
            ledger(23, {"application": "pulsar", "component": "mystery"}),
        ],
        refs=[
            (1, "data", ML, None),
            (99, "data", ML, None),  # its current ledger: the orphans are older
            (2, "cursor", "other/ns/persistent/t", "s"),
            (-1, "unreadable", "public/default/persistent/broken", None),
        ],
        ctxs=[(3, UUID_A, "ledger", ML, "b", True)],
    )
    findings = T.bk_findings(bk, refs, ctxs, cutoff_ms=CUTOFF)
    assert by_id(findings) == {
        10: ("candidate", None),
        11: ("candidate", None),
        12: ("candidate", None),
        13: ("report-only", "compacted-ledger-has-no-request-type"),
        14: ("excluded", "not-pulsar"),
        15: ("excluded", "no-application-tag"),
        16: ("excluded", "unparseable-metadata"),
        17: ("excluded", "too-young"),
        18: ("excluded", "too-young"),
        19: ("excluded", "open-recently-modified"),
        20: ("candidate", None),
        21: ("excluded", "owner-metadata-unreadable"),
        22: ("report-only", "legacy-tags-not-accepted"),  # psr/managed-ledger: the service refuses it
        23: ("excluded", "unknown-component"),
    }
    expected = spark.createDataFrame(
        [
            (
                10,
                "data",
                "MANAGED_LEDGER",
                "public/default/orders-partition-1",
                "public",
                "public/default",
                None,
                None,
                1000,
            ),
            (
                11,
                "cursor",
                "MANAGED_CURSOR",
                "public/default/orders-partition-1",
                "public",
                "public/default",
                "my-sub",
                None,
                1100,
            ),
            (
                12,
                "schema",
                "SCHEMA_STORAGE",
                "public/default/orders",
                "public",
                "public/default",
                None,
                "public/default/orders",
                1200,
            ),
            (13, "compacted", None, "public/default/orders", "public", "public/default", None, None, 1300),
        ],
        "ledger_id long, component string, ledger_component string, topic_name string, tenant string, "
        "namespace string, cursor_name string, schema_id string, bytes long",
    )
    actual = findings.where(F.col("ledger_id").isin(10, 11, 12, 13)).select(*expected.columns)
    assertDataFrameEqual(actual, expected)


def test_legacy_tagged_ledgers_are_reported_never_candidates(spark: Any) -> None:
    """Ledgers tagged with an early LedgerMetadataUtils' keys: the service's metadata check (``judge``)
    accepts only the ``pulsar/`` ones, so a request for them would always end SKIPPED_METADATA_MISMATCH."""
    app = {"application": "pulsar"}
    ml_tags = {**app, "component": "managed-ledger"}
    bk, refs, ctxs, _ = frames(
        spark,
        [
            ledger(50, {**ml_tags, "psr/managed-ledger": ML}),
            ledger(51, {**ml_tags, "psr/managed-ledger": ML, "psr/cursor": "my-sub"}),
            ledger(52, {**ml_tags, "pulsar/managed-ledger": ML, "psr/cursor": "my-sub"}),  # half legacy
            ledger(53, {**app, "component": "schema", "schemaId": "public/default/orders"}),
            # Compacted ledgers of that time: component managed-ledger, no topic-data tag.
            ledger(54, {**ml_tags, "compactedTopic": "persistent://public/default/orders"}),
            ledger(55, {**data_tags(), "schemaId": "x/y/z"}),  # a stray legacy key the service never reads
            ledger(56, {**data_tags(), "psr/managed-ledger": "other/ns/persistent/t"}),  # current key wins
            ledger(57, {**ml_tags, "psr/managed-ledger": ML}, ctime_ms=YOUNG, mtime_ms=YOUNG),
        ],
    )
    findings = T.bk_findings(bk, refs, ctxs, cutoff_ms=CUTOFF)
    got = {
        r["ledger_id"]: (r["status"], r["reason"], r["component"], r["topic_name"])
        for r in findings.collect()
    }
    legacy = ("report-only", "legacy-tags-not-accepted")
    orders_1 = "public/default/orders-partition-1"
    assert got == {
        50: (*legacy, "data", orders_1),
        51: (*legacy, "cursor", orders_1),
        52: (*legacy, "cursor", orders_1),
        53: (*legacy, "schema", "public/default/orders"),
        54: (*legacy, "compacted", "public/default/orders"),
        55: ("candidate", None, "data", orders_1),
        56: ("candidate", None, "data", orders_1),
        57: ("excluded", "too-young", "data", orders_1),  # the safety rules still come first
    }
    from reconcile.job import REPORT_ONLY_WHY

    assert legacy[1] == T.LEGACY_TAGS_REASON
    assert legacy[1] in REPORT_ONLY_WHY  # the operator is told why they were not submitted


def test_offload_findings_match_both_key_variants_and_group_objects(spark: Any) -> None:
    _, refs, ctxs, objs = frames(
        spark,
        [],
        refs=[(7, "data", ML, None), (8, "data", ML, None)],
        ctxs=[(7, UUID_A, "ledger", ML, "b", True), (8, UUID_B, "segment", ML, "b", True)],
        objs=[
            ("b", f"{UUID_A}-ledger-7", 1000, OLD),  # live classic offload
            ("b", f"{UUID_A}-ledger-7-index", 10, OLD),
            ("b", UUID_B, 2000, OLD),  # live segment
            ("b", f"{UUID_B}-index", 20, OLD),
            ("b", f"{UUID_C}-ledger-9", 3000, OLD),  # orphan: one finding for both objects
            ("b", f"{UUID_C}-ledger-9-index", 30, OLD - 10),
            ("b", f"{UUID_C}-ledger-8", 50, OLD),  # other uuid of a referenced ledger (failed offload)
            ("b", f"{UUID_A}-ledger-5", 60, YOUNG),  # known uuid, other ledger: unreferenced, but young
            ("b", UUID_C, 70, OLD),  # segment nobody names
            ("b", "README.txt", 5, OLD),
        ],
    )
    findings = T.offload_findings(objs, refs, ctxs, cutoff_ms=CUTOFF)
    rows = {
        tuple(r["keys"]): (r["status"], r["reason"], r["ledger_id"], r["bytes"]) for r in findings.collect()
    }
    assert rows == {
        (f"{UUID_C}-ledger-9", f"{UUID_C}-ledger-9-index"): ("candidate", None, 9, 3030),
        (f"{UUID_C}-ledger-8",): ("excluded", "ledger-id-referenced", 8, 50),
        (f"{UUID_A}-ledger-5",): ("excluded", "too-young", 5, 60),
        (UUID_C,): ("report-only", "segment-ledger-unknown", None, 70),
        ("README.txt",): ("excluded", "unrecognized-key", None, 5),
    }
    candidate = findings.where(F.col("status") == "candidate").first()
    assert candidate is not None
    assert (candidate["uuid"], candidate["variant"], candidate["ledger_type"], candidate["created_ms"]) == (
        UUID_C,
        "ledger",
        "OFFLOAD_LEDGER",
        OLD,
    )


def test_parse_object_keys(spark: Any) -> None:
    objs = spark.createDataFrame(
        [
            ("b", f"{UUID_A}-ledger-12", 1, 0),
            ("b", f"{UUID_A}-ledger-12-index", 1, 0),
            ("b", f"{UUID_A}-index", 1, 0),
            ("b", f"{UUID_A.upper()}-ledger-1", 1, 0),
            ("b", f"x{UUID_A}", 1, 0),
        ],
        T.OFFLOAD_OBJECTS_SCHEMA,
    )
    expected = spark.createDataFrame(
        [
            (f"{UUID_A}-ledger-12", "ledger", UUID_A, 12),
            (f"{UUID_A}-ledger-12-index", "ledger", UUID_A, 12),
            (f"{UUID_A}-index", "segment", UUID_A, None),
            (f"{UUID_A.upper()}-ledger-1", None, None, None),
            (f"x{UUID_A}", None, None, None),
        ],
        "key string, variant string, uuid string, ledger_id long",
    )
    assertDataFrameEqual(T.parse_object_keys(objs).select("key", "variant", "uuid", "ledger_id"), expected)


def test_offload_owners_from_metadata_then_bk_tag_else_report_only(spark: Any) -> None:
    bk, refs, ctxs, objs = frames(
        spark,
        [
            ledger(31, data_tags("acme/ns/persistent/from-bk")),
            ledger(34, data_tags("acme/ns/persistent/from-bk")),
            ledger(35, data_tags("acme/ns/persistent/from-bk")),
        ],
        refs=[(-1, "unreadable", "public/default/persistent/broken", None)],
        objs=[("b", f"{UUID_A}-ledger-{i}", 10, OLD) for i in range(30, 38)],
    )
    raw = T.bk_findings(bk, refs, ctxs, cutoff_ms=CUTOFF).unionByName(
        T.offload_findings(objs, refs, ctxs, cutoff_ms=CUTOFF)
    )
    meta, other = "public/default/persistent/from-meta", "public/default/persistent/other"
    owners = spark.createDataFrame(
        [
            ("b", UUID_A, 30, meta, False, False),
            # 31: no owners row (not HEADed): the BK tag alone decides, the service checks the rest.
            ("b", UUID_A, 32, None, True, False),  # untagged, and no BK ledger: owner unknown comes first
            ("b", UUID_A, 33, "public/default/persistent/broken", False, False),  # its contexts are unknown
            # Offloaded before apache/pulsar#14907: no ManagedLedgerName, so only the BK tag names the
            # topic, which the service does not accept for objects: it would skip the request.
            ("b", UUID_A, 34, None, True, False),
            ("b", UUID_A, 35, meta, True, False),  # one object (or its role) untagged: the name wins nothing
            ("b", UUID_A, 36, meta, False, True),  # data and index name different managed ledgers
            ("b", UUID_A, 37, other, None, None),  # flags unknown: as not untagged
        ],
        T.OFFLOAD_OWNERS_SCHEMA,
    )
    findings = T.attach_offload_owners(raw, owners, bk, refs)
    assert list(findings.columns) == list(T.FINDINGS_COLUMNS)
    got = {
        (r["storage"], r["ledger_id"]): (
            r["topic_name"],
            r["tenant"],
            r["namespace"],
            r["status"],
            r["reason"],
        )
        for r in findings.collect()
    }
    from_bk = ("acme/ns/from-bk", "acme", "acme/ns")
    from_meta = ("public/default/from-meta", "public", "public/default")
    untagged = ("report-only", T.OBJECTS_UNTAGGED_REASON)
    assert T.OBJECTS_UNTAGGED_REASON == "objects-untagged"
    assert got == {
        ("offload", 30): (*from_meta, "candidate", None),
        ("offload", 31): (*from_bk, "candidate", None),
        ("offload", 32): (None, None, None, "report-only", "owner-unknown"),
        ("offload", 33): (
            "public/default/broken",
            "public",
            "public/default",
            "excluded",
            "owner-metadata-unreadable",
        ),
        ("offload", 34): (*from_bk, *untagged),
        ("offload", 35): (*from_meta, *untagged),
        ("offload", 36): (*from_meta, "report-only", "objects-owner-conflict"),
        ("offload", 37): ("public/default/other", "public", "public/default", "candidate", None),
        # The BK copies are judged by their own (current) tags, which the service does accept for them.
        ("bookkeeper", 31): (*from_bk, "candidate", None),
        ("bookkeeper", 34): (*from_bk, "candidate", None),
        ("bookkeeper", 35): (*from_bk, "candidate", None),
    }
    from reconcile.job import REPORT_ONLY_WHY

    # The operator is told why they were not submitted.
    assert "apache/pulsar#14907" in REPORT_ONLY_WHY[T.OBJECTS_UNTAGGED_REASON]
    assert T.OBJECTS_CONFLICT_REASON in REPORT_ONLY_WHY


def test_only_offload_candidates_are_judged_by_their_objects_tags(spark: Any) -> None:
    """The owners flags never touch a finding that already has a status of its own (too young, ...)."""
    bk, refs, ctxs, objs = frames(
        spark,
        [ledger(60, data_tags())],
        objs=[("b", f"{UUID_A}-ledger-61", 10, YOUNG), ("b", f"{UUID_A}-ledger-62", 10, OLD)],
        refs=[(62, "data", ML, None)],
    )
    raw = T.bk_findings(bk, refs, ctxs, cutoff_ms=CUTOFF).unionByName(
        T.offload_findings(objs, refs, ctxs, cutoff_ms=CUTOFF)
    )
    owners = spark.createDataFrame(
        [("b", UUID_A, 61, None, True, True), ("b", UUID_A, 62, None, True, True)], T.OFFLOAD_OWNERS_SCHEMA
    )
    got = {
        (r["storage"], r["ledger_id"]): (r["status"], r["reason"])
        for r in T.attach_offload_owners(raw, owners, bk, refs).collect()
    }
    assert got == {
        ("bookkeeper", 60): ("candidate", None),
        ("offload", 61): ("excluded", "too-young"),
        ("offload", 62): ("excluded", "ledger-id-referenced"),
    }


def test_reconcile_tenant_filter_and_summary(spark: Any) -> None:
    bk, refs, ctxs, objs = frames(
        spark,
        [
            ledger(40, data_tags("acme/ns/persistent/t")),
            ledger(41, data_tags()),
            ledger(42, data_tags()),
            ledger(43, None),
        ],
    )
    owners = spark.createDataFrame([], T.OFFLOAD_OWNERS_SCHEMA)
    everything = T.reconcile(bk, refs, ctxs, objs, owners, cutoff_ms=CUTOFF)
    assert sorted(r["ledger_id"] for r in everything.collect()) == [40, 41, 42, 43]
    acme = T.reconcile(bk, refs, ctxs, objs, owners, cutoff_ms=CUTOFF, tenant="acme")
    assert [r["ledger_id"] for r in acme.collect()] == [40]
    expected = spark.createDataFrame(
        [
            (None, None, "unknown", "bookkeeper", "excluded", 1, 4300),
            ("acme", "acme/ns", "data", "bookkeeper", "candidate", 1, 4000),
            ("public", "public/default", "data", "bookkeeper", "candidate", 2, 8300),
        ],
        "tenant string, namespace string, component string, storage string, status string, "
        "count long, bytes long",
    )
    assertDataFrameEqual(T.summarize(everything), expected)


def test_bk_copy_of_offloaded_ledger_marked_bk_deleted_is_a_candidate(spark: Any) -> None:
    """A ledger its managed ledger lists as offloaded with ``bookkeeperDeleted=true`` keeps its objects (its
    offload context) but not its BK copy: the broker marked that copy deleted and never retries the delete.
    Any other reference of the id, an unreadable owner, youth or tags of another owner still keep it."""
    released = T.BK_COPY_OF_OFFLOADED_REASON
    other_ml = "public/default/persistent/other"
    bk, refs, ctxs, objs = frames(
        spark,
        [
            ledger(70, data_tags()),  # the leak: a candidate, with the reason
            ledger(71, data_tags()),  # offloaded, bookkeeperDeleted=false (within the lag): the broker's
            ledger(72, data_tags()),  # leaked, but also another topic's cursor ledger
            ledger(73, data_tags()),  # leaked, but another managed ledger lists it as data
            ledger(74, data_tags()),  # leaked, but a cursor's mark-delete position is in it
            ledger(75, data_tags(), ctime_ms=YOUNG, mtime_ms=YOUNG),  # leaked, too young
            ledger(76, data_tags(other_ml)),  # tagged as another managed ledger's
            ledger(77, {**data_tags(), "pulsar/cursor": "sub"}),  # tagged as a cursor ledger
            ledger(78, data_tags("public/default/persistent/broken")),  # its tags' owner is unreadable
            ledger(79, data_tags()),  # an ordinary orphan: a candidate without a reason, as ever
        ],
        refs=[
            (70, "offloaded-bk-deleted", ML, None),
            (71, "data", ML, None),
            (72, "offloaded-bk-deleted", ML, None),
            (72, "cursor", other_ml, "s"),
            (73, "offloaded-bk-deleted", ML, None),
            (73, "data", other_ml, None),
            (74, "offloaded-bk-deleted", ML, None),
            (74, "position", ML, "s"),
            (75, "offloaded-bk-deleted", ML, None),
            (76, "offloaded-bk-deleted", ML, None),
            (77, "offloaded-bk-deleted", ML, None),
            (78, "offloaded-bk-deleted", "public/default/persistent/broken", None),
            (-1, "unreadable", "public/default/persistent/broken", None),
            (80, "data", ML, None),  # its current ledger: 79 is older
        ],
        ctxs=[
            (70, UUID_A, "ledger", ML, "b", True),
            (71, UUID_A, "ledger", ML, "b", True),
            (72, UUID_A, "ledger", ML, "b", True),
            (73, UUID_A, "ledger", ML, "b", True),
            (73, UUID_B, "ledger", other_ml, "b", True),  # the other managed ledger's own context keeps it
        ],
        objs=[("b", f"{UUID_A}-ledger-70", 1000, OLD), ("b", f"{UUID_A}-ledger-70-index", 10, OLD)],
    )
    findings = T.reconcile(
        bk, refs, ctxs, objs, spark.createDataFrame([], T.OFFLOAD_OWNERS_SCHEMA), cutoff_ms=CUTOFF
    )
    got = {(r["storage"], r["ledger_id"]): (r["status"], r["reason"]) for r in findings.collect()}
    assert released == "bk-copy-of-offloaded-ledger"
    assert got == {
        ("bookkeeper", 70): ("candidate", released),
        ("bookkeeper", 75): ("excluded", "too-young"),
        ("bookkeeper", 76): ("excluded", T.OFFLOADED_TAGS_MISMATCH_REASON),
        ("bookkeeper", 77): ("excluded", T.OFFLOADED_TAGS_MISMATCH_REASON),
        ("bookkeeper", 78): ("excluded", "owner-metadata-unreadable"),
        ("bookkeeper", 79): ("candidate", None),
        # 70's objects are no finding at all: its offload context still names them.
    }
    row = findings.where(F.col("ledger_id") == 70).first()
    assert row is not None
    assert (row["ledger_type"], row["ledger_component"], row["component"], row["topic_name"]) == (
        "LEDGER",
        "MANAGED_LEDGER",
        "data",
        "public/default/orders-partition-1",
    )
    from reconcile.candidates import build_requests

    requests, rejected = build_requests([row.asDict()])
    assert rejected == []
    (request,) = requests
    assert (request.ledger_type.value, request.ledger_component.value, request.ledger_id) == (
        "LEDGER",
        "MANAGED_LEDGER",
        70,
    )
    assert request.topic_name == "public/default/orders-partition-1" and request.context is None
    # Objects stay protected: for them the entry is a reference like any other.
    assert {r["ledger_id"] for r in T.referenced_ids(refs, ctxs).collect()} >= {70, 75, 76, 77}
    assert 70 not in {r["ledger_id"] for r in T.bk_referenced_ids(refs, ctxs).collect()}


def test_objects_of_a_replaced_offload_attempt_are_candidates_with_their_reason(spark: Any) -> None:
    """Objects under another uuid than the one the listing managed ledger stores for the ledger: a replaced
    attempt, a candidate (reason ``replaced-offload-attempt``) when nothing else references the id and the
    objects name that managed ledger. Anything else keeps them (``ledger-id-referenced``)."""
    other = "public/default/persistent/other"
    bk, refs, ctxs, objs = frames(
        spark,
        [],
        refs=[
            (70, "data", ML, None),  # replaced: listed with a classic uuid, a cursor's position in it
            (70, "position", ML, "sub"),
            (71, "offloaded-bk-deleted", ML, None),  # replaced, its BK copy released
            (72, "data", ML, None),  # the id is also another topic's compacted ledger: kept
            (72, "compacted", other, "__compaction"),
            (73, "data", ML, None),  # listed with segments only: no uuid to compare, kept
            (74, "data", ML, None),  # listed without any offload context: kept
            (75, "data", ML, None),  # replaced, but the objects name another managed ledger: kept
            (76, "data", ML, None),  # replaced, but too young
            (77, "data", ML, None),  # a reference of unknown kind beside it: kept
            (77, None, ML, None),
        ],
        ctxs=[
            (70, UUID_A, "ledger", ML, "b", False),  # the new attempt, still uploading
            (71, UUID_A, "ledger", ML, "b", True),
            (72, UUID_A, "ledger", ML, "b", True),
            (73, UUID_A, "segment", ML, "b", True),
            (75, UUID_A, "ledger", ML, "b", True),
            (76, UUID_A, "ledger", ML, "b", True),
            (77, UUID_A, "ledger", ML, "b", True),
        ],
        objs=[("b", f"{UUID_A}-ledger-70", 10, OLD)]  # the stored attempt's own objects: not a finding
        + [("b", f"{UUID_C}-ledger-{i}", 10, OLD) for i in range(70, 76)]
        + [("b", f"{UUID_C}-ledger-76", 10, YOUNG), ("b", f"{UUID_C}-ledger-77", 10, OLD)],
    )
    raw = T.offload_findings(objs, refs, ctxs, cutoff_ms=CUTOFF)
    owners = spark.createDataFrame(
        [("b", UUID_C, i, other if i == 75 else ML, False, False) for i in range(70, 78)],
        T.OFFLOAD_OWNERS_SCHEMA,
    )
    got = {
        r["ledger_id"]: (r["status"], r["reason"], r["uuid"])
        for r in T.attach_offload_owners(raw, owners, bk, refs).collect()
    }
    replaced = ("candidate", T.REPLACED_OFFLOAD_REASON, UUID_C)
    kept = ("excluded", "ledger-id-referenced", UUID_C)
    assert got == {
        70: replaced,
        71: replaced,
        72: kept,
        73: kept,
        74: kept,
        75: kept,
        76: ("excluded", "too-young", UUID_C),
        77: kept,
    }
    candidate = T.attach_offload_owners(raw, owners, bk, refs).where(F.col("ledger_id") == 70).first()
    assert candidate is not None and candidate["topic_name"] == "public/default/orders-partition-1"


def _findings_of(spark: Any, bk: list[dict[str, Any]], refs: Sequence[tuple[Any, ...]]) -> Any:
    frames_ = frames(spark, bk, refs=refs)
    return T.bk_findings(frames_[0], frames_[1], frames_[2], cutoff_ms=CUTOFF)


def test_a_ledger_listed_in_any_store_is_kept(spark: Any) -> None:
    """The anti-join runs against the references of every store: the other cluster's listing keeps its
    ledger of the same (geo-replicated) managed-ledger name. "Newer than listed" is bounded by the lowest
    store's newest: 10 is above what B lists, so B may be creating it (the service's ``_bound``)."""
    b = "zk-b:2181/pulsar-b"
    findings = _findings_of(
        spark,
        [ledger(i, data_tags()) for i in (3, 5, 9, 10)]
        + [ledger(i, {**data_tags(), "pulsar/cursor": "s"}) for i in (20, 22, 24)]
        + [ledger(i, {**data_tags(), "pulsar/cursor": "inline"}) for i in (4, 40)]
        + [ledger(31, {"application": "pulsar", "component": "schema", "pulsar/schemaId": SCHEMA})],
        refs=[
            (9, "data", ML, None, "ours"),
            (5, "data", ML, None, b),
            (23, "cursor", ML, "s", "ours"),
            (23, "cursor", ML, "s", b),
            (30, "schema", SCHEMA, None, "ours"),
            (-1, "cursor-inline", ML, "inline", "ours"),  # bounded by ML's newest data ledger in ours: 9
        ],
    )
    assert by_id(findings) == {
        3: ("candidate", None),
        10: ("excluded", T.NEWER_THAN_LISTED_REASON),
        20: ("candidate", None),
        22: ("candidate", None),
        24: ("excluded", T.NEWER_THAN_LISTED_REASON),  # newer than the cursor's stored ledger
        31: ("excluded", T.NEWER_THAN_LISTED_REASON),  # newer than the locator's
        4: ("candidate", None),
        40: ("excluded", T.NEWER_THAN_LISTED_REASON),  # an inline cursor's ledger being created
    }


def test_unknown_namespaces_are_report_only_with_the_reason(spark: Any) -> None:
    """Candidates whose tagged namespace no store knows (data and cursor by the managed ledger, schema by
    its id, v1 namespaces of three segments) become report-only with the reason; known ones, and findings
    that were no candidates, are unchanged. Without a reason (``none``, no evidence) nothing changes."""
    v1_ml = "acme/east/orders/persistent/t"
    findings = _findings_of(
        spark,
        [
            ledger(1, data_tags()),  # public/default: known
            ledger(2, data_tags("ghost/ns/persistent/t")),
            ledger(3, {**data_tags("ghost/ns/persistent/t"), "pulsar/cursor": "s"}),
            ledger(4, {"application": "pulsar", "component": "schema", "pulsar/schemaId": "ghost/ns/t"}),
            ledger(5, data_tags(v1_ml)),  # acme/east/orders: known (v1)
            ledger(6, data_tags(v1_ml.replace("orders", "other"))),
            ledger(7, data_tags("ghost/ns/persistent/t"), ctime_ms=YOUNG),  # excluded already
        ],
        refs=[],
    )
    namespaces = spark.createDataFrame(
        [("ours", "public/default"), ("zk-b:2181/b", "acme/east/orders"), ("ours", "ghost")],
        T.NAMESPACES_SCHEMA,
    )
    unknown = ("report-only", T.NAMESPACE_UNKNOWN_REASON)
    assert by_id(T.unknown_namespaces(findings, namespaces, T.NAMESPACE_UNKNOWN_REASON)) == {
        1: ("candidate", None),
        2: unknown,
        3: unknown,
        4: unknown,
        5: ("candidate", None),
        6: unknown,
        7: ("excluded", "too-young"),
    }
    assert by_id(T.unknown_namespaces(findings, namespaces, None)) == by_id(findings)


def test_shared_bookkeeper_evidence_is_a_recent_ledger_of_an_unknown_namespace(spark: Any) -> None:
    """Per unknown namespace, its Pulsar ledgers created at or after the window's start, whatever their
    status (a recent one is usually too young); old ones of an unknown namespace and recent ones of a known
    namespace are no evidence."""
    findings = _findings_of(
        spark,
        [
            ledger(1, data_tags(), ctime_ms=YOUNG),  # known namespace
            ledger(2, data_tags("b/private/persistent/t")),  # unknown, old
            ledger(3, data_tags("b/private/persistent/t"), ctime_ms=YOUNG),
            ledger(4, data_tags("b/private/persistent/u"), md_ctime_ms=YOUNG),
            ledger(5, data_tags("gone/ns/persistent/t")),  # unknown, old: a namespace deleted half-way
            ledger(6, {"application": "other", "component": "managed-ledger"}, ctime_ms=YOUNG),
        ],
        refs=[],
    )
    namespaces = spark.createDataFrame([("ours", "public/default")], T.NAMESPACES_SCHEMA)
    evidence = [
        r.asDict()
        for r in T.shared_bookkeeper_evidence(findings, namespaces, recent_from_ms=CUTOFF).collect()
    ]
    assert evidence == [
        {"namespace": "b/private", "ledgers": 2, "newest_ledger_id": 4, "newest_created_ms": YOUNG}
    ]
