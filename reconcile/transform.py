"""Reconcile: pure ``DataFrame -> DataFrame`` functions (no I/O, every parameter explicit).

Inputs are the extract tables (schemas below); the output is one *findings* table: every BK ledger and every
offloaded ledger (group of objects) that nothing references, each with a ``status``:

* ``candidate`` — an orphan to hand to the deletion service (which re-checks everything before deleting);
* ``report-only`` — an orphan the service has no request type for (compacted ledgers, streaming-offload
  segments whose key carries no ledger id, objects whose owner cannot be told), or whose tags the service
  does not accept as proof of ownership (the pre-release keys, see :data:`LEGACY_KEYS`; offloaded objects
  without ``ManagedLedgerName``/``role``, see :func:`attach_offload_owners`): reported, never submitted;
* ``excluded`` — kept by a safety rule, named in ``reason``.

Safety rules, in order (the first that applies is the reason):

1. never an id referenced anywhere (anti-join against every reference of every kind, and every offload
   context) — these rows are not findings at all; for objects, a still-referenced ledger id with another uuid
   is ``excluded`` as ``ledger-id-referenced``, except the objects of a replaced offload attempt: their
   ledger listed by one managed ledger only, whose entry stores another classic uuid, and the objects naming
   that managed ledger (see :func:`replaced_offload_owners`) are a ``candidate`` with the reason
   :data:`REPLACED_OFFLOAD_REASON`, the safety rules below still applying. Another exception, for BK ledgers
   only: a ledger-list entry whose offload is complete and whose BK copy the broker marked deleted
   (reference kind ``offloaded-bk-deleted``, and that entry's offload contexts) does not keep a BK ledger of
   that id (see :func:`bk_referenced_ids`): if the znode is still there, the broker's delete failed and it
   never retries. Such a ledger, old enough and tagged as that managed ledger's data, is a ``candidate``
   with the reason :data:`BK_COPY_OF_OFFLOADED_REASON` (any other reference of the id still keeps it; tags
   naming another owner: ``excluded``, :data:`OFFLOADED_TAGS_MISMATCH_REASON`);
2. ``application=pulsar`` only: unparseable metadata, no ``application`` tag, or another application;
3. an owner whose metadata record could not be decoded (``unreadable`` reference rows) keeps everything;
4. created at or after the cut-off (``now - min age``): znode ctime (or the metadata ctime if later) for
   ledgers, LastModified for objects;
5. a ledger that is not CLOSED and whose znode changed at or after the cut-off (still being written).

After the report-only reasons, a BK ledger newer than what its owner lists in every store that lists it is
``excluded`` (:data:`NEWER_THAN_LISTED_REASON`, :func:`newest_listed`).

The references are those of every Pulsar metadata store read (ours and the other clusters' sharing this
BookKeeper): listed in any keeps a ledger. Then :func:`unknown_namespaces` makes the candidates of a namespace
no store knows report-only (with other stores declared always, with ``none`` only when
:func:`shared_bookkeeper_evidence` finds another writer).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from reconcile.candidates import REPLACED_OFFLOAD_REASON
from reconcile.extract import CURSOR_INLINE, OFFLOADED_BK_DELETED

__all__ = [
    "BK_COPY_OF_OFFLOADED_REASON",
    "BK_LEDGERS_SCHEMA",
    "FINDINGS_COLUMNS",
    "LEGACY_KEYS",
    "LEGACY_TAGS_REASON",
    "NAMESPACES_SCHEMA",
    "NAMESPACE_UNKNOWN_REASON",
    "NEWER_THAN_LISTED_REASON",
    "SHARED_BOOKKEEPER_REASON",
    "OBJECTS_CONFLICT_REASON",
    "OBJECTS_UNTAGGED_REASON",
    "OFFLOADED_TAGS_MISMATCH_REASON",
    "OFFLOAD_CONTEXTS_SCHEMA",
    "OFFLOAD_OBJECTS_SCHEMA",
    "OFFLOAD_OWNERS_SCHEMA",
    "REFERENCES_SCHEMA",
    "REPLACED_OFFLOAD_REASON",
    "attach_offload_owners",
    "bk_findings",
    "bk_referenced_ids",
    "finding_namespace",
    "classify_bk_ledgers",
    "filter_tenant",
    "offload_findings",
    "parse_object_keys",
    "reconcile",
    "referenced_ids",
    "shared_bookkeeper_evidence",
    "unknown_namespaces",
    "summarize",
    "unreadable_owners",
    "unreferenced_bk",
    "newest_listed",
]

BK_LEDGERS_SCHEMA = StructType(
    [
        StructField("ledger_id", LongType(), False),
        StructField("path", StringType()),
        StructField("format_version", IntegerType()),
        StructField("application", StringType()),
        StructField("component", StringType()),
        StructField("managed_ledger", StringType()),
        StructField("cursor_name", StringType()),
        StructField("schema_id", StringType()),
        StructField("compacted_topic", StringType()),
        StructField("custom", MapType(StringType(), StringType())),
        StructField("length", LongType()),
        StructField("state", StringType()),
        StructField("ctime_ms", LongType()),
        StructField("mtime_ms", LongType()),
        StructField("md_ctime_ms", LongType()),
        StructField("parse_error", StringType()),
    ]
)
REFERENCES_SCHEMA = StructType(
    [
        StructField("ledger_id", LongType(), False),
        StructField("kind", StringType()),
        StructField("owner", StringType()),
        StructField("cursor_name", StringType()),
        StructField("store", StringType()),  # the Pulsar metadata store it was read from
    ]
)
# The namespaces each Pulsar metadata store knows (reconcile.extract.scan_namespaces_unit).
NAMESPACES_SCHEMA = StructType([StructField("store", StringType()), StructField("namespace", StringType())])
OFFLOAD_CONTEXTS_SCHEMA = StructType(
    [
        StructField("ledger_id", LongType(), False),
        StructField("uuid", StringType()),
        StructField("variant", StringType()),
        StructField("managed_ledger", StringType()),
        StructField("bucket", StringType()),
        StructField("complete", BooleanType()),
    ]
)
OFFLOAD_OBJECTS_SCHEMA = StructType(
    [
        StructField("bucket", StringType(), False),
        StructField("key", StringType(), False),
        StructField("size", LongType()),
        StructField("last_modified_ms", LongType()),
    ]
)
OFFLOAD_OWNERS_SCHEMA = StructType(
    [
        StructField("bucket", StringType(), False),
        StructField("uuid", StringType(), False),
        StructField("ledger_id", LongType()),
        StructField("managed_ledger", StringType()),
        StructField("untagged", BooleanType()),
        StructField("conflicting", BooleanType()),
    ]
)

FINDINGS_COLUMNS = (
    "storage",
    "ledger_id",
    "component",
    "ledger_component",
    "ledger_type",
    "topic_name",
    "tenant",
    "namespace",
    "managed_ledger",
    "cursor_name",
    "schema_id",
    "bucket",
    "uuid",
    "variant",
    "keys",
    "bytes",
    "created_ms",
    "status",
    "reason",
)

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_LEDGER_KEY = rf"^({_UUID})-ledger-([0-9]{{1,19}})(-index)?$"
_SEGMENT_KEY = rf"^({_UUID})(-index)?$"
_ML_NAME = r"^(.+)/persistent/([^/]+)$"

CANDIDATE, REPORT_ONLY, EXCLUDED = "candidate", "report-only", "excluded"
_COMPONENT_TO_REQUEST = {"data": "MANAGED_LEDGER", "cursor": "MANAGED_CURSOR", "schema": "SCHEMA_STORAGE"}

# Column -> the key an early LedgerMetadataUtils wrote for it (the class came with apache/pulsar#3525, early
# 2019; that version and the cookbooks-bookkeepermetadata page of the time both name them), before the keys
# got their ``pulsar/`` prefix: ledgers tagged by a broker of that time carry these instead of the current
# ones (a short window: the 2.3.0 docs already list the ``pulsar/`` keys; see docs/reconcile.md). The deletion
# service's metadata check (activities/bookkeeper.py ``judge``) accepts only the current keys, so a request
# for such a ledger would always end SKIPPED_METADATA_MISMATCH. They are read to say what the ledger is,
# and the finding is ``report-only`` (LEGACY_TAGS_REASON), never a candidate. (Back then compacted ledgers
# had ``component=managed-ledger`` plus ``compactedTopic``: see classify_bk_ledgers.)
LEGACY_KEYS = {
    "managed_ledger": "psr/managed-ledger",
    "cursor_name": "psr/cursor",
    "schema_id": "schemaId",
    "compacted_topic": "compactedTopic",
}
LEGACY_TAGS_REASON = "legacy-tags-not-accepted"
_REPORT_ONLY_BK_REASONS = (LEGACY_TAGS_REASON, "compacted-ledger-has-no-request-type")
# Offload candidates whose objects' user metadata does not prove their owner the way the deletion service
# demands (activities/offload.py ``_ownership_problem``: every existing object carries ManagedLedgerName =
# the request's managed ledger and role = data|index for its key): a request would always end
# SKIPPED_METADATA_MISMATCH with nothing deleted, so they are report-only, left to an operator.
OBJECTS_UNTAGGED_REASON = "objects-untagged"
OBJECTS_CONFLICT_REASON = "objects-owner-conflict"
# The BK copy of a ledger its managed ledger lists as offloaded (complete) with ``bookkeeperDeleted=true``:
# the broker stored that flag, then deleted the BK ledger; the znode still being there means that delete
# failed, and the broker never tries again (it reads the ledger from tiered storage). Unlike every other
# reason this one goes with ``candidate``: it says why a ledger still listed in the metadata is an orphan.
BK_COPY_OF_OFFLOADED_REASON = "bk-copy-of-offloaded-ledger"
# What may reference the ledger id of such objects: the managed ledger's own entry and positions in it.
_REPLACED_OFFLOAD_REFERENCE_KINDS = ("data", OFFLOADED_BK_DELETED, "position", "terminated")
# Such a BK ledger whose tags do not say it is that managed ledger's data (another owner, another
# component): not the copy the metadata speaks of, so nothing proves it is the broker's leftover. Kept.
OFFLOADED_TAGS_MISMATCH_REASON = "offloaded-ledger-tags-mismatch"
# Shared BookKeeper (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH; apache/pulsar#5985). The tags a broker writes
# (LedgerMetadataUtils.buildBaseManagedLedgerMetadata, buildMetadataForSchema) name no cluster, so a ledger of
# a namespace no declared store knows (no /managed-ledgers/<namespace> in any: the service's
# PulsarMetadataStore.knows_namespace) may be an undeclared cluster's: with other stores declared, it is never
# submitted (report-only, NAMESPACE_UNKNOWN_REASON). With ``none``, a recent one is evidence that another
# writer shares the BookKeeper (shared_bookkeeper_evidence); then no ledger of any unknown namespace is
# submitted (SHARED_BOOKKEEPER_REASON), and without evidence such ledgers are orphans of a namespace deleted
# half-way, candidates like any other.
# A ledger newer than what its owner lists (data: the managed ledger's list; cursor: the cursor's stored
# ledger; schema: the locator) in a store that lists the owner, bounded by the lowest such store's: the
# service's own rule (workflows/ledger_deletion.py ``_unsettled``, activities/bookkeeper.py ``_bound``). A
# broker creates a ledger before it stores the list naming it (ManagedLedgerImpl.createComplete ->
# updateLedgersListAfterRollover), and a geo-replicated topic's ledger may be any of its clusters' being
# created; the service keeps such a request and dead-letters it, so it is no candidate here.
NEWER_THAN_LISTED_REASON = "newer-than-listed"
NAMESPACE_UNKNOWN_REASON = "namespace-unknown"
SHARED_BOOKKEEPER_REASON = "namespace-unknown-bookkeeper-shared"
_ML_NAMESPACE_V2 = r"^([^/]+/[^/]+)/persistent/"
_ML_NAMESPACE_V1 = r"^([^/]+/[^/]+/[^/]+)/persistent/"
_TOPIC_NAMESPACE_V2 = r"^([^/]+/[^/]+)/[^/]+$"
_TOPIC_NAMESPACE_V1 = r"^([^/]+/[^/]+/[^/]+)/[^/]+$"


def _first(rules: list[tuple[Column, str]], default: Column) -> Column:
    """``CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... ELSE default END``."""
    expr = F.when(rules[0][0], F.lit(rules[0][1]))
    for cond, value in rules[1:]:
        expr = expr.when(cond, F.lit(value))
    return expr.otherwise(default)


# ---------------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------------


def referenced_ids(references: DataFrame, contexts: DataFrame) -> DataFrame:
    """Every ledger id referenced anywhere (``ledger_id``, distinct): what keeps offloaded objects."""
    refs = references.where(F.col("ledger_id") >= 0).select("ledger_id")
    return refs.unionByName(contexts.select("ledger_id")).distinct()


def _offloaded_bk_deleted(references: DataFrame) -> DataFrame:
    """``(ledger_id, owner)`` of the ledger-list entries whose BK copy the broker marked deleted."""
    return references.where(F.col("kind") == OFFLOADED_BK_DELETED).select("ledger_id", "owner").distinct()


def bk_referenced_ids(references: DataFrame, contexts: DataFrame) -> DataFrame:
    """Every ledger id that keeps a BK ledger (``ledger_id``, distinct): :func:`referenced_ids` without the
    ``offloaded-bk-deleted`` entries and the offload contexts of those same entries (same ledger id, same
    managed ledger). Any other reference of the id (a cursor, schema or compacted ledger, a position, another
    managed ledger listing it, ...) still keeps it."""
    released = _offloaded_bk_deleted(references).select("ledger_id", F.col("owner").alias("managed_ledger"))
    refs = references.where((F.col("ledger_id") >= 0) & (F.col("kind") != OFFLOADED_BK_DELETED))
    ctxs = contexts.select("ledger_id", "managed_ledger").join(
        released, ["ledger_id", "managed_ledger"], "left_anti"
    )
    return refs.select("ledger_id").unionByName(ctxs.select("ledger_id")).distinct()


def replaced_offload_owners(references: DataFrame, contexts: DataFrame) -> DataFrame:
    """``(ledger_id, managed_ledger)`` of the ledgers whose objects under any other uuid than the stored
    one are a replaced offload attempt (:data:`REPLACED_OFFLOAD_REASON`): referenced by one managed ledger
    only, in its ledger list (and positions), whose offload contexts for the id are its and include a
    classic uuid. Any other reference of the id, or a context of another managed ledger, keeps them."""
    refs = (
        references.where(F.col("ledger_id") >= 0)
        .groupBy("ledger_id")
        .agg(
            F.countDistinct("owner").alias("_ref_owners"),
            # A null kind or owner counts as another reference: it keeps the objects.
            F.min(
                F.coalesce(F.col("kind").isin(*_REPLACED_OFFLOAD_REFERENCE_KINDS), F.lit(False))
                & F.col("owner").isNotNull()
            )
            .cast(IntegerType())
            .alias("_kinds_ok"),
            F.max(F.col("kind").isin("data", OFFLOADED_BK_DELETED).cast(IntegerType())).alias("_listed"),
            F.first("owner").alias("managed_ledger"),
        )
        .where((F.col("_ref_owners") == 1) & (F.col("_kinds_ok") == 1) & (F.col("_listed") == 1))
    )
    ctxs = (
        contexts.groupBy("ledger_id")
        .agg(
            F.countDistinct("managed_ledger").alias("_ctx_owners"),
            F.max((F.col("variant") == "ledger").cast(IntegerType())).alias("_classic"),
            F.first("managed_ledger").alias("_ctx_ml"),
        )
        .where((F.col("_ctx_owners") == 1) & (F.col("_classic") == 1))
    )
    return (
        refs.join(ctxs, "ledger_id")
        .where(F.col("managed_ledger") == F.col("_ctx_ml"))
        .select("ledger_id", "managed_ledger")
    )


def unreadable_owners(references: DataFrame) -> DataFrame:
    """Owners (managed-ledger names, schema ids) whose metadata did not decode (``owner``, distinct)."""
    return references.where(F.col("kind") == "unreadable").select("owner").distinct()


# ---------------------------------------------------------------------------------------------------------
# BookKeeper ledgers
# ---------------------------------------------------------------------------------------------------------


def _topic_of_ml(ml: Column) -> Column:
    return F.when(ml.rlike(_ML_NAME), F.regexp_replace(ml, _ML_NAME, "$1/$2"))


def _with_tenant(df: DataFrame) -> DataFrame:
    topic = F.col("topic_name")
    return df.withColumn("tenant", F.when(topic.contains("/"), F.substring_index(topic, "/", 1))).withColumn(
        "namespace", F.when(topic.contains("/"), F.regexp_extract(topic, r"^(.*)/[^/]+$", 1))
    )


def classify_bk_ledgers(bk: DataFrame) -> DataFrame:
    """Add ``component`` (data|cursor|schema|compacted|unknown), ``topic_name``, ``tenant``, ``namespace``,
    and ``legacy_tags``: true when a tag that names the owner of this component came from a
    :data:`LEGACY_KEYS` key (read only when the current key is absent).
    """
    custom = F.col("custom")
    df = bk
    for column, key in LEGACY_KEYS.items():
        from_legacy = F.col(column).isNull() & custom.getItem(key).isNotNull()
        df = df.withColumn(f"_legacy_{column}", F.coalesce(from_legacy, F.lit(False))).withColumn(
            column, F.coalesce(column, custom.getItem(key))
        )
    component = F.col("component")
    df = df.withColumn(
        "component",
        F.when(component == "schema", "schema")
        .when(component.isin("compacted-ledger", "compacted-topic"), "compacted")
        # How that early LedgerMetadataUtils tagged compacted ledgers (no topic-data tag, so never data).
        .when((component == "managed-ledger") & F.col("compacted_topic").isNotNull(), "compacted")
        .when((component == "managed-ledger") & F.col("cursor_name").isNotNull(), "cursor")
        .when(component == "managed-ledger", "data")
        .otherwise("unknown"),
    )
    component = F.col("component")
    # Only the tags the service would compare for this component count: a stray legacy key next to
    # complete current tags does not stop a request the service accepts.
    df = df.withColumn(
        "legacy_tags",
        F.when(component == "schema", F.col("_legacy_schema_id"))
        .when(component == "compacted", F.col("_legacy_compacted_topic"))
        .when(component == "cursor", F.col("_legacy_managed_ledger") | F.col("_legacy_cursor_name"))
        .when(component == "data", F.col("_legacy_managed_ledger"))
        .otherwise(F.lit(False)),
    ).drop(*(f"_legacy_{column}" for column in LEGACY_KEYS))
    df = df.withColumn(
        "topic_name",
        F.when(component == "schema", F.col("schema_id"))
        .when(
            component == "compacted",
            F.regexp_replace(F.col("compacted_topic"), r"^(non-)?persistent://", ""),
        )
        .when(component.isin("data", "cursor"), _topic_of_ml(F.col("managed_ledger"))),
    )
    return _with_tenant(df)


def _of_ids(df: DataFrame, ids: DataFrame) -> DataFrame:
    """The rows of ``df`` whose ``ledger_id`` is in ``ids``. Everything computed per ledger id (the
    anti-joins, the aggregates of replaced_offload_owners) comes out the same for those ids from these rows
    alone, and they are few: the references of the ledgers and objects at hand, not of the whole cluster.
    ``ids`` is broadcast: it is the extracted BK ledgers (the unreferenced ones) or the unmatched offload
    objects."""
    return df.join(F.broadcast(ids.select("ledger_id").distinct()), "ledger_id", "left_semi")


def newest_listed(references: DataFrame, owners: DataFrame) -> DataFrame:
    """The bound of "newer than listed" of each owner in ``owners`` (``owner``: managed ledger or schema id)
    that some store lists: ``_nl_component`` (data|cursor|schema), ``_nl_owner``, ``_nl_cursor`` (null but
    for cursors) and ``_newest_listed``. Per store, the newest id its record names: the managed ledger's
    whole list (released copies too), the cursor's stored ledger (an inline cursor: its managed ledger's
    newest), the locator's ledgers; then the lowest of those stores. Aggregations over the references of
    these owners only (a broadcast semi-join)."""
    kind = F.col("kind")
    component = (
        F.when(kind.isin("data", OFFLOADED_BK_DELETED), "data")
        .when(kind == "cursor", "cursor")
        .when(kind == "schema", "schema")
    )
    refs = references.join(F.broadcast(owners.select("owner").distinct()), "owner", "left_semi")
    per_store = (
        refs.where(component.isNotNull() & (F.col("ledger_id") >= 0))
        .select(
            component.alias("_nl_component"),
            F.col("owner").alias("_nl_owner"),
            F.when(kind == "cursor", F.col("cursor_name")).alias("_nl_cursor"),
            "store",
            "ledger_id",
        )
        .groupBy("_nl_component", "_nl_owner", "_nl_cursor", "store")
        .agg(F.max("ledger_id").alias("_store_newest"))
    )
    # A cursor storing its position inline is bounded, in its store, by its managed ledger's newest data
    # ledger: ManagedCursorImpl.createNewMetadataLedger creates the new cursor ledger before
    # switchToNewLedger stores its id, and ids only grow (the service's ``_inline_cursor_bound``).
    inline = refs.where(kind == CURSOR_INLINE).select(
        F.col("owner").alias("_nl_owner"), F.col("cursor_name").alias("_nl_cursor"), "store"
    )
    data_newest = per_store.where(F.col("_nl_component") == "data").select(
        "_nl_owner", "store", "_store_newest"
    )
    inline_bounds = inline.join(data_newest, ["_nl_owner", "store"]).select(
        F.lit("cursor").alias("_nl_component"), "_nl_owner", "_nl_cursor", "store", "_store_newest"
    )
    return (
        per_store.unionByName(inline_bounds)
        .groupBy("_nl_component", "_nl_owner", "_nl_cursor")
        .agg(F.min("_store_newest").alias("_newest_listed"))
    )


def unreferenced_bk(bk: DataFrame, references: DataFrame, contexts: DataFrame) -> DataFrame:
    """The BK ledgers no reference keeps: the main anti-join (docs/reconcile.md), an equi-join on
    ``ledger_id`` that Spark runs as a hash or sort-merge join (``reconcile.plans`` and its test check it),
    against the references of these ledgers' ids only (:func:`_of_ids`)."""
    refs, ctxs = _of_ids(references, bk), _of_ids(contexts, bk)
    return bk.join(bk_referenced_ids(refs, ctxs), "ledger_id", "left_anti")


def bk_findings(bk: DataFrame, references: DataFrame, contexts: DataFrame, *, cutoff_ms: int) -> DataFrame:
    """Unreferenced BK ledgers with status and reason (see the module docstring for the rules)."""
    refs = _of_ids(references, bk)
    df = classify_bk_ledgers(unreferenced_bk(bk, references, contexts))
    # The managed ledger(s) listing it as offloaded with its BK copy deleted (none for ordinary orphans).
    released = (
        _offloaded_bk_deleted(refs).groupBy("ledger_id").agg(F.collect_set("owner").alias("_released_by"))
    )
    df = df.join(released, "ledger_id", "left")
    is_released = F.col("_released_by").isNotNull()
    tags_match = (F.col("component") == "data") & F.coalesce(
        F.array_contains(F.col("_released_by"), F.col("managed_ledger")), F.lit(False)
    )
    bad_owners = unreadable_owners(references).select(
        F.col("owner").alias("_bad_owner"), F.lit(True).alias("_bad")
    )
    owner_key = F.coalesce(F.col("managed_ledger"), F.col("schema_id"))
    df = df.join(bad_owners, owner_key == F.col("_bad_owner"), "left")
    bounds = newest_listed(references, df.select(owner_key.alias("owner")).where(F.col("owner").isNotNull()))
    df = df.join(
        bounds,
        (F.col("component") == F.col("_nl_component"))
        & (owner_key == F.col("_nl_owner"))
        & F.when(F.col("component") == "cursor", F.col("cursor_name")).eqNullSafe(F.col("_nl_cursor")),
        "left",
    )
    created = F.greatest(F.col("ctime_ms"), F.coalesce(F.col("md_ctime_ms"), F.col("ctime_ms")))
    app = F.col("application")
    component = F.col("component")
    reason = _first(
        [
            (F.col("parse_error").isNotNull(), "unparseable-metadata"),
            (app.isNull(), "no-application-tag"),
            (app != "pulsar", "not-pulsar"),
            (F.col("_bad").isNotNull(), "owner-metadata-unreadable"),
            (created >= F.lit(cutoff_ms), "too-young"),
            (
                (F.col("state") != "CLOSED") & (F.col("mtime_ms") >= F.lit(cutoff_ms)),
                "open-recently-modified",
            ),
            (component == "unknown", "unknown-component"),
            (F.col("topic_name").isNull(), "owner-unknown"),
            (is_released & ~tags_match, OFFLOADED_TAGS_MISMATCH_REASON),
            # Before the compacted rule: even with a compacted request type the service would refuse these.
            (F.col("legacy_tags"), LEGACY_TAGS_REASON),
            (component == "compacted", "compacted-ledger-has-no-request-type"),
            (F.col("ledger_id") > F.col("_newest_listed"), NEWER_THAN_LISTED_REASON),
        ],
        F.when(is_released, F.lit(BK_COPY_OF_OFFLOADED_REASON)).otherwise(F.lit(None).cast(StringType())),
    )
    status = (
        F.when(F.col("reason").isNull(), F.lit(CANDIDATE))
        .when(F.col("reason") == BK_COPY_OF_OFFLOADED_REASON, F.lit(CANDIDATE))
        .when(F.col("reason").isin(*_REPORT_ONLY_BK_REASONS), F.lit(REPORT_ONLY))
        .otherwise(F.lit(EXCLUDED))
    )
    mapping = F.create_map(*[F.lit(x) for kv in _COMPONENT_TO_REQUEST.items() for x in kv])
    return (
        df.withColumn("reason", reason)
        .withColumn("status", status)
        .select(
            F.lit("bookkeeper").alias("storage"),
            "ledger_id",
            "component",
            mapping[component].alias("ledger_component"),
            F.lit("LEDGER").alias("ledger_type"),
            "topic_name",
            "tenant",
            "namespace",
            "managed_ledger",
            "cursor_name",
            "schema_id",
            F.lit(None).cast(StringType()).alias("bucket"),
            F.lit(None).cast(StringType()).alias("uuid"),
            F.lit(None).cast(StringType()).alias("variant"),
            F.array(F.col("path")).alias("keys"),
            F.coalesce(F.col("length"), F.lit(0)).cast(LongType()).alias("bytes"),
            created.alias("created_ms"),
            "status",
            "reason",
        )
    )


# ---------------------------------------------------------------------------------------------------------
# Offloaded objects
# ---------------------------------------------------------------------------------------------------------


def parse_object_keys(objects: DataFrame) -> DataFrame:
    """Add ``variant`` (ledger | segment | null), ``uuid``, ``ledger_id`` (null for segments) from the key."""
    key = F.col("key")
    is_ledger = key.rlike(_LEDGER_KEY)
    is_segment = key.rlike(_SEGMENT_KEY)
    return (
        objects.withColumn("variant", F.when(is_ledger, "ledger").when(is_segment, "segment"))
        .withColumn(
            "uuid",
            F.when(is_ledger, F.regexp_extract(key, _LEDGER_KEY, 1)).when(
                is_segment, F.regexp_extract(key, _SEGMENT_KEY, 1)
            ),
        )
        .withColumn("ledger_id", F.when(is_ledger, F.regexp_extract(key, _LEDGER_KEY, 2).cast(LongType())))
    )


def offload_findings(
    objects: DataFrame, references: DataFrame, contexts: DataFrame, *, cutoff_ms: int
) -> DataFrame:
    """Offloaded ledgers (objects grouped by bucket, uuid, ledger id) that no surviving offload context names.

    Classic keys match on (uuid, ledger id), segment keys on the uuid, against every context of every
    managed ledger (whatever its bucket: uuids are random, a match anywhere means in use). The owner
    (``managed_ledger``/``topic_name``) is not known yet: see :func:`attach_offload_owners`.
    """
    parsed = parse_object_keys(objects)
    ctx_pairs = contexts.select("uuid", "ledger_id").distinct()
    ctx_uuids = contexts.select("uuid").distinct()
    ledger_objs = parsed.where(F.col("variant") == "ledger").join(
        ctx_pairs, ["uuid", "ledger_id"], "left_anti"
    )
    segment_objs = parsed.where(F.col("variant") == "segment").join(ctx_uuids, ["uuid"], "left_anti")
    other = parsed.where(F.col("variant").isNull()).withColumn("uuid", F.col("key"))
    unref = ledger_objs.unionByName(segment_objs).unionByName(other)
    grouped = unref.groupBy("bucket", "variant", "uuid", "ledger_id").agg(
        F.sort_array(F.collect_list("key")).alias("keys"),
        F.sum("size").cast(LongType()).alias("bytes"),
        F.max("last_modified_ms").alias("created_ms"),
    )
    at_hand = grouped.where(F.col("ledger_id").isNotNull())
    refs, ctxs = _of_ids(references, at_hand), _of_ids(contexts, at_hand)
    referenced = referenced_ids(refs, ctxs).select(
        F.col("ledger_id").alias("_ref_id"), F.lit(True).alias("_referenced")
    )
    grouped = grouped.join(referenced, F.col("ledger_id") == F.col("_ref_id"), "left")
    replaced = replaced_offload_owners(refs, ctxs).select(
        F.col("ledger_id").alias("_rp_id"), F.col("managed_ledger").alias("_replaced_in")
    )
    grouped = grouped.join(
        replaced, (F.col("ledger_id") == F.col("_rp_id")) & (F.col("variant") == "ledger"), "left"
    )
    is_replaced = F.col("_replaced_in").isNotNull()
    reason = _first(
        [
            (F.col("variant").isNull(), "unrecognized-key"),
            (F.col("_referenced").isNotNull() & ~is_replaced, "ledger-id-referenced"),
            (F.col("created_ms") >= F.lit(cutoff_ms), "too-young"),
            (F.col("variant") == "segment", "segment-ledger-unknown"),
            (is_replaced, REPLACED_OFFLOAD_REASON),
        ],
        F.lit(None).cast(StringType()),
    )
    status = (
        F.when(F.col("reason").isNull() | (F.col("reason") == REPLACED_OFFLOAD_REASON), F.lit(CANDIDATE))
        .when(F.col("reason") == "segment-ledger-unknown", F.lit(REPORT_ONLY))
        .otherwise(F.lit(EXCLUDED))
    )
    none = F.lit(None).cast(StringType())
    return (
        grouped.withColumn("reason", reason)
        .withColumn("status", status)
        .select(
            F.lit("offload").alias("storage"),
            "ledger_id",
            F.lit("data").alias("component"),
            F.lit("MANAGED_LEDGER").alias("ledger_component"),
            F.lit("OFFLOAD_LEDGER").alias("ledger_type"),
            none.alias("topic_name"),
            none.alias("tenant"),
            none.alias("namespace"),
            # Known here only for a replaced attempt: the managed ledger that lists the ledger, which the
            # objects' own owner must be (attach_offload_owners).
            F.when(is_replaced, F.col("_replaced_in")).otherwise(none).alias("managed_ledger"),
            none.alias("cursor_name"),
            none.alias("schema_id"),
            "bucket",
            F.when(F.col("variant").isNotNull(), F.col("uuid")).alias("uuid"),
            "variant",
            F.col("keys").cast(ArrayType(StringType())).alias("keys"),
            "bytes",
            "created_ms",
            "status",
            "reason",
        )
    )


def attach_offload_owners(
    findings: DataFrame, owners: DataFrame, bk: DataFrame, references: DataFrame
) -> DataFrame:
    """Fill the owner of offload findings: the objects' ``ManagedLedgerName`` user metadata (``owners``, see
    :data:`OFFLOAD_OWNERS_SCHEMA` and :func:`reconcile.candidates.head_owners`), else the BK ledger of the
    same id's ``pulsar/managed-ledger`` tag (or its legacy ``psr/managed-ledger``: here it only names the
    topic, as the service checks an offload request against the objects' own metadata, never the BK tags).

    Candidates, first rule that applies: one whose owner's metadata did not decode (its offload contexts are
    unknown) is ``excluded`` (``owner-metadata-unreadable``); then ``report-only``: owner still unknown
    (``owner-unknown``); an object without ``ManagedLedgerName`` or the role its key calls for, so the owner
    is at best the BK tag's (:data:`OBJECTS_UNTAGGED_REASON`); objects naming different managed ledgers
    (:data:`OBJECTS_CONFLICT_REASON`). ``owners`` should have a row for every offload candidate: without one
    the objects' metadata is unknown here and the BK tag alone decides, the service checking the rest.
    """
    own = owners.select(
        F.col("bucket").alias("_o_bucket"),
        F.col("uuid").alias("_o_uuid"),
        F.col("ledger_id").alias("_o_ledger"),
        F.col("managed_ledger").alias("_o_ml"),
        F.col("untagged").alias("_o_untagged"),
        F.col("conflicting").alias("_o_conflicting"),
    )
    bk_owner = (
        classify_bk_ledgers(bk)
        .where(F.col("component") == "data")
        .select(F.col("ledger_id").alias("_b_ledger"), F.col("managed_ledger").alias("_b_ml"))
    )
    is_offload = F.col("storage") == "offload"
    joined = findings.join(
        own,
        is_offload
        & (F.col("bucket") == F.col("_o_bucket"))
        & (F.col("uuid") == F.col("_o_uuid"))
        & (F.col("ledger_id").eqNullSafe(F.col("_o_ledger"))),
        "left",
    ).join(bk_owner, is_offload & (F.col("ledger_id") == F.col("_b_ledger")), "left")
    # A replaced attempt's objects must name the managed ledger that lists their ledger: else another
    # topic's objects carry this ledger id, which stays referenced for them (excluded below).
    listed_in = F.when(F.col("reason") == REPLACED_OFFLOAD_REASON, F.col("managed_ledger"))
    ml = F.when(is_offload, F.coalesce("_o_ml", "_b_ml")).otherwise(F.col("managed_ledger"))
    joined = joined.withColumn("_listed_in", listed_in)
    df = joined.withColumn("managed_ledger", ml).withColumn(
        "topic_name", F.when(is_offload, _topic_of_ml(F.col("managed_ledger"))).otherwise(F.col("topic_name"))
    )
    df = _with_tenant(df.drop("tenant", "namespace"))
    bad = unreadable_owners(references).select(F.col("owner").alias("_bad_owner"), F.lit(True).alias("_bad"))
    df = df.join(bad, is_offload & (F.col("managed_ledger") == F.col("_bad_owner")), "left")
    candidate = is_offload & (F.col("status") == CANDIDATE)
    other_owner = (
        candidate & F.col("_listed_in").isNotNull() & ~F.col("_listed_in").eqNullSafe(F.col("_o_ml"))
    )
    unreadable = candidate & F.col("_bad").isNotNull()
    unknown = candidate & F.col("topic_name").isNull()
    # Null where no owners row joined (BK findings, offloads that were no candidates) or it did not say.
    untagged = candidate & F.coalesce(F.col("_o_untagged"), F.lit(False))
    conflicting = candidate & F.coalesce(F.col("_o_conflicting"), F.lit(False))
    df = df.withColumn(
        "reason",
        F.when(other_owner, F.lit("ledger-id-referenced"))
        .when(unreadable, F.lit("owner-metadata-unreadable"))
        .when(unknown, F.lit("owner-unknown"))
        .when(untagged, F.lit(OBJECTS_UNTAGGED_REASON))
        .when(conflicting, F.lit(OBJECTS_CONFLICT_REASON))
        .otherwise(F.col("reason")),
    ).withColumn(
        "status",
        F.when(other_owner | unreadable, F.lit(EXCLUDED))
        .when(unknown | untagged | conflicting, F.lit(REPORT_ONLY))
        .otherwise(F.col("status")),
    )
    return df.select(*FINDINGS_COLUMNS)


# ---------------------------------------------------------------------------------------------------------
# Whole reconcile, tenant filter, summary
# ---------------------------------------------------------------------------------------------------------


def _namespace_of(name: Column, v2: str, v1: str) -> Column:
    return F.when(name.rlike(v2), F.regexp_extract(name, v2, 1)).when(
        name.rlike(v1), F.regexp_extract(name, v1, 1)
    )


def finding_namespace() -> Column:
    """The namespace a finding's tags name, as the service's ``namespace_of`` reads it
    (ledger_deletion/shared_bookkeeper.py): the managed ledger's part before its first ``/persistent/``
    (``TopicName.getPersistenceNamingEncoding``), else the schema id's or topic's part before its local name
    (``tenant/ns`` or v1's ``tenant/cluster/ns``). Null when no tag names one."""
    return F.coalesce(
        _namespace_of(F.col("managed_ledger"), _ML_NAMESPACE_V2, _ML_NAMESPACE_V1),
        _namespace_of(F.col("schema_id"), _TOPIC_NAMESPACE_V2, _TOPIC_NAMESPACE_V1),
        _namespace_of(F.col("topic_name"), _TOPIC_NAMESPACE_V2, _TOPIC_NAMESPACE_V1),
    )


def _with_known(findings: DataFrame, namespaces: DataFrame) -> DataFrame:
    """Add ``_ns`` (:func:`finding_namespace`) and ``_known`` (true when any store knows it). The known
    namespaces are few (one row per namespace and store): broadcast, an equi-join."""
    known = (
        namespaces.select(F.col("namespace").alias("_known_ns")).distinct().withColumn("_known", F.lit(True))
    )
    return findings.withColumn("_ns", finding_namespace()).join(
        F.broadcast(known), F.col("_ns") == F.col("_known_ns"), "left"
    )


def shared_bookkeeper_evidence(
    findings: DataFrame, namespaces: DataFrame, *, recent_from_ms: int
) -> DataFrame:
    """Evidence that another writer shares this BookKeeper: per namespace no store knows, its Pulsar BK
    ledgers created after ``recent_from_ms`` (``namespace``, ``ledgers``, ``newest_ledger_id``,
    ``newest_created_ms``), whatever their status: the service's ``tripwire.is_evidence`` (now - created <
    window), created being the later of the znode's and the metadata's ctime.

    A cluster creates ``/managed-ledgers/<namespace>`` before the namespace's first ledger
    (``ManagedLedgerImpl.initialize`` stores the managed ledger's record, then creates its ledger), and the
    extract reads the stores after it lists the ledgers: a recent ledger of a namespace no store knows is not
    ours. An old one may be the leftover of a namespace deleted half-way."""
    df = _with_known(findings, namespaces)
    recent = (
        (F.col("storage") == "bookkeeper")
        & F.col("_ns").isNotNull()
        & F.col("_known").isNull()
        & (F.col("created_ms") > F.lit(recent_from_ms))
    )
    return (
        df.where(recent)
        .groupBy(F.col("_ns").alias("namespace"))
        .agg(
            F.count(F.lit(1)).alias("ledgers"),
            F.max("ledger_id").alias("newest_ledger_id"),
            F.max("created_ms").alias("newest_created_ms"),
        )
        .orderBy("namespace")
    )


def unknown_namespaces(findings: DataFrame, namespaces: DataFrame, reason: str | None) -> DataFrame:
    """With ``reason``: every candidate whose namespace (:func:`finding_namespace`) no store in
    ``namespaces`` knows, or that names none, becomes ``report-only`` with that reason. ``None``: unchanged
    (``none`` declared and no evidence of another writer)."""
    if reason is None:
        return findings
    df = _with_known(findings, namespaces)
    unknown = (F.col("status") == CANDIDATE) & F.col("_known").isNull()
    return (
        df.withColumn("reason", F.when(unknown, F.lit(reason)).otherwise(F.col("reason")))
        .withColumn("status", F.when(unknown, F.lit(REPORT_ONLY)).otherwise(F.col("status")))
        .select(*FINDINGS_COLUMNS)
    )


def filter_tenant(findings: DataFrame, tenant: str | None) -> DataFrame:
    """Only the findings of one tenant (``None``: all). Findings of unknown owner are dropped by a filter."""
    return findings if tenant is None else findings.where(F.col("tenant") == tenant)


def reconcile(
    bk: DataFrame,
    references: DataFrame,
    contexts: DataFrame,
    objects: DataFrame,
    owners: DataFrame,
    *,
    cutoff_ms: int,
    tenant: str | None = None,
    namespaces: DataFrame | None = None,
    unknown_namespace_reason: str | None = None,
) -> DataFrame:
    """All findings (BK and offload), owners attached, the candidates of namespaces no store knows made
    report-only with ``unknown_namespace_reason`` (see :func:`unknown_namespaces`; ``namespaces`` None: no
    such rule), filtered to ``tenant`` when given."""
    findings = bk_findings(bk, references, contexts, cutoff_ms=cutoff_ms).unionByName(
        offload_findings(objects, references, contexts, cutoff_ms=cutoff_ms)
    )
    findings = attach_offload_owners(findings, owners, bk, references)
    if namespaces is not None:
        findings = unknown_namespaces(findings, namespaces, unknown_namespace_reason)
    return filter_tenant(findings, tenant)


def summarize(findings: DataFrame) -> DataFrame:
    """Counts and bytes by tenant, namespace, component, storage and status (the report's data)."""
    return (
        findings.groupBy("tenant", "namespace", "component", "storage", "status")
        .agg(F.count(F.lit(1)).alias("count"), F.sum("bytes").cast(LongType()).alias("bytes"))
        .orderBy("tenant", "namespace", "component", "storage", "status")
    )
