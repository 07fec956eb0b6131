"""The reconcile job: extract -> reconcile (Spark) -> candidates, findings, report [-> submit].

Run it as ``ledger-deletion reconcile`` (local Spark, ``local[*]``, against the embedded stack by default), or
on a Spark cluster::

    spark-submit --master spark://spark-master:7077 --deploy-mode client \\
        --conf spark.sql.shuffle.partitions=64 --driver-memory 4g \\
        "$(python -c 'import reconcile.spark_submit as j; print(j.__file__)')" \\
        --min-age 24h --out /shared/reconcile/$(date +%F) [--tenant T] [--submit] [--resume]

The driver host needs the project installed (``pip install '.[spark]'``): the extract and the outputs run
there, with settings (``LEDGER_DELETION_ZOOKEEPER``, ``LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER``,
``LEDGER_DELETION_S3_ENDPOINT``, ``LEDGER_DELETION_OFFLOAD_BUCKET``, ...) from its environment as for every
other command. The executors need nothing of ours: the reconcile is pure Spark SQL (no Python UDFs), so no
``--py-files``. ``--out`` must be a directory driver and executors share (e.g. an NFS mount): the executors
read the extract's Parquet there and write ``findings.parquet``. Client deploy mode: the extract on the
driver talks to ZooKeeper and S3.

Why the extract runs in a process pool on the driver and not in Spark tasks: it keeps every finished unit
as a part file, so ``--resume`` restarts where it stopped (a failed Spark job starts over); it needs neither
executors with network access to ZooKeeper nor kazoo on them; and its load on ZooKeeper is an explicit
number of sessions (``--extract-workers``), where a Spark cluster would point every executor at the
ensemble the brokers depend on. It reads little: ledger ids from child lists, Pulsar's records, and the
metadata of the unreferenced ledgers only, in ZooKeeper multi-reads (see ``reconcile.extract``). Spark does
the part that is a join: the reconcile.

Order and safety: ledger ids are listed first, objects second, references third, the metadata of the
unreferenced ledgers last (see ``reconcile.extract``); the transforms are pure functions of those snapshots
(``reconcile.transform``); every candidate still goes through the deletion service's own checks (topic, owner
broker, BK metadata match) when submitted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ledger_deletion.tripwire import WINDOW as TRIPWIRE_WINDOW
from reconcile.candidates import (
    Decided,
    Rejected,
    RequestsFile,
    Written,
    head_owners,
    read_requests,
    write_requests,
)
from reconcile.extract import (
    BK_LEDGER_IDS,
    BK_LEDGERS,
    NAMESPACES,
    OFFLOAD_CONTEXTS,
    OFFLOAD_OBJECTS,
    REFERENCES,
    ExtractConfig,
    ExtractResult,
    extract_all,
)
from reconcile.report import ReportRow, human_bytes, render_chart, render_table, rows_from_summary, totals

__all__ = ["JobConfig", "JobResult", "Tripwire", "parse_duration", "run", "spark_session"]

CANDIDATES_JSONL = "candidates.jsonl"
CANDIDATES_AVRO = "candidates.avro"
FINDINGS_PARQUET = "findings.parquet"
REPORT_PNG = "report.png"
SUMMARY_JSON = "summary.json"
OFFLOAD_OWNERS_PARQUET = "offload_owners.parquet"  # what the HEADs of the offload candidates' objects said

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Legacy-tagged ledgers listed by id, and offloads the service cannot prove the owner of listed by key, in
# summary.json (findings.parquet has them all).
LEGACY_LISTED = 1000
DECIDED_LISTED = 1000  # candidates decided before, listed in summary.json with how
UNPROVEN_LISTED = 1000
# Why a report-only finding is not submitted, as the operator is told (reasons from reconcile.transform).
REPORT_ONLY_WHY = {
    "legacy-tags-not-accepted": "tagged with the early (2019) keys psr/managed-ledger, psr/cursor, schemaId, "
    "compactedTopic, which the deletion service does not accept as proof of ownership",
    "compacted-ledger-has-no-request-type": "compacted ledgers: the request has no component for them",
    "segment-ledger-unknown": "streaming-offload segments: the key carries no ledger id",
    "owner-unknown": "offloaded objects whose topic cannot be told",
    "objects-untagged": "the objects carry no ManagedLedgerName (offloaded before apache/pulsar#14907) or no "
    "data/index role: the service cannot prove their owner, remove them by hand after checking",
    "objects-owner-conflict": "the objects of one offloaded ledger name different managed ledgers in "
    "ManagedLedgerName: the service deletes neither, remove them by hand after checking",
    "namespace-unknown": "their namespace is known to none of the Pulsar metadata stores read (ours and "
    "those in LEDGER_DELETION_BOOKKEEPER_SHARED_WITH): they may be a Pulsar cluster's nobody declared; "
    "declare its store, or check by hand that no cluster has the namespace",
    "namespace-unknown-bookkeeper-shared": "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH is 'none', yet ledgers of "
    "a namespace this cluster does not know were created recently (shared_bookkeeper_evidence): another "
    "writer shares this BookKeeper, so no ledger of an unknown namespace is submitted; declare its store",
}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``24h``, ``7d`` (or a bare number of seconds) -> seconds.

    Raises:
        ValueError: anything else, or a negative duration.
    """
    value = text.strip().lower()
    unit = 1
    if value and value[-1] in _UNITS:
        unit, value = _UNITS[value[-1]], value[:-1]
    try:
        seconds = float(value) * unit
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 15m, 24h, 7d)") from None
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"duration must be >= 0, got {text!r}")
    return seconds


class Tripwire(Protocol):
    """The service's shared-BookKeeper tripwire (``ledger_deletion.tripwire``), as the job needs it."""

    def tripped(self) -> bool:
        """Whether it is tripped now."""
        ...

    def trip(self, evidence: Sequence[dict[str, Any]]) -> None:
        """Trip it for these rows of :func:`reconcile.transform.shared_bookkeeper_evidence`."""
        ...


@dataclass(frozen=True)
class JobConfig:
    extract: ExtractConfig
    out: Path
    min_age_seconds: float = 86_400.0
    tenant: str | None = None
    master: str | None = "local[*]"  # None: whatever spark-submit configured
    now_ms: int | None = None  # the clock the cut-off is taken from; None = when the job starts
    resume: bool = False
    shuffle_partitions: int = 8
    # LEDGER_DELETION_BOOKKEEPER_SHARED_WITH: True for ``none``, False when other clusters' stores are
    # declared (extract.other_pulsar_metadata_stores), None when unset (a dry run only): then, as with
    # stores declared, no ledger of a namespace no store knows is a candidate.
    bookkeeper_alone: bool | None = None
    # With ``none``: a ledger of an unknown namespace created within this window before ``now`` is evidence
    # of another writer (transform.shared_bookkeeper_evidence): the service's tripwire.WINDOW (the 4-hour
    # rollover plus 2 hours for a request to be decided), so reconcile and the service agree.
    tripwire_window_seconds: float = TRIPWIRE_WINDOW.total_seconds()
    # The service's latest live decision per (request type, ledger id), from its audit log
    # (ledger_deletion/audit): the report marks each candidate decided before, and how.
    decided: Mapping[tuple[str, int], Decided] = field(default_factory=dict)


@dataclass
class JobResult:
    out: Path
    cutoff_ms: int
    extract: ExtractResult
    candidates: int = 0  # requests written to candidates.jsonl (and .avro)
    rejected: list[Rejected] = field(default_factory=list)
    summary: list[ReportRow] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    published: int = 0
    # Orphans found but not submitted: reason -> (count, bytes); and the legacy-tagged ones by id.
    report_only: dict[str, tuple[int, int]] = field(default_factory=dict)
    legacy_tagged: list[dict[str, Any]] = field(default_factory=list)
    # Offloaded objects whose metadata does not prove their owner (objects-untagged, objects-owner-conflict),
    # by key: the service will never delete them, an operator has to.
    unproven_offloads: list[dict[str, Any]] = field(default_factory=list)
    # Candidates that carry a reason (why a ledger the metadata still lists is an orphan): reason ->
    # (count, bytes): bk-copy-of-offloaded-ledger, replaced-offload-attempt.
    candidate_reasons: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Per namespace no store knows: its recently created ledgers (transform.shared_bookkeeper_evidence).
    shared_bookkeeper_evidence: list[dict[str, Any]] = field(default_factory=list)
    decided: list[Decided] = field(default_factory=list)  # candidates the audit log shows decided before
    tripped: bool = False  # the tripwire was tripped (``none``, evidence, and a submitting run)

    @property
    def requests(self) -> list[Any]:
        """Every request written (PendingDeleteLedgerInfo), read back from ``candidates.jsonl``: the job
        itself never holds them all; this is for callers that want them in memory (tests, small runs)."""
        return list(read_requests(self.out / CANDIDATES_JSONL))


def spark_session(
    master: str | None = "local[*]", shuffle_partitions: int = 8, app_name: str = "ledger-deletion-reconcile"
) -> Any:
    """A SparkSession for the job (reuses the active one). ``master=None``: as ``spark-submit`` configured."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master:
        # Started from the CLI: our defaults. Under spark-submit (master None) its own --conf values rule.
        builder = (
            builder.master(master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.driver.memory", "3g")
        )
    if (master or "").startswith("local"):
        # Python workers, should any stage need them (the reconcile is pure SQL), must run this interpreter.
        # (SparkContext reads PYSPARK_PYTHON, not the spark.pyspark.python setting, for local workers.)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def _stage(timings: dict[str, float], name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        timings[name] = time.monotonic() - started


Group = tuple[str, str, int | None, list[str]]  # an offload candidate's bucket, uuid, ledger id, keys
OwnersRow = tuple[str, str, int | None, str | None, bool, bool]  # transform.OFFLOAD_OWNERS_SCHEMA
# Offload candidates HEADed per batch (candidates.head_owners); their owners rows are written to Parquet
# batch by batch, so the driver holds one batch whatever the number of candidates.
HEAD_BATCH = 5000


@dataclass(frozen=True)
class Tables:
    """The extract's tables as Spark reads them (schemas of ``reconcile.transform``)."""

    bk: Any
    refs: Any
    ctxs: Any
    objs: Any
    namespaces: Any


@dataclass(frozen=True)
class Aggregates:
    """What the job collects from the findings to the driver: small by construction (rows per namespace
    and component, per reason, and lists capped at their ``*_LISTED``)."""

    summary: list[ReportRow]
    report_only: dict[str, tuple[int, int]]
    candidate_reasons: dict[str, tuple[int, int]]
    legacy_tagged: list[dict[str, Any]]
    unproven_offloads: list[dict[str, Any]]


def run(
    config: JobConfig,
    *,
    spark: Any = None,
    console: Console | None = None,
    publish: Callable[[Sequence[Any]], int] | None = None,
    s3_client: Any = None,
    extracted: ExtractResult | None = None,
    tripwire: Tripwire | None = None,
    head: Callable[[Sequence[Group]], Sequence[OwnersRow]] | None = None,
) -> JobResult:
    """The whole job, stage by stage. ``publish`` (e.g. ``ledger_deletion.submit.publish_requests`` bound to
    settings) is called with the requests (a sequence reading ``candidates.jsonl``, never all in memory)
    only when given: without it this is a dry run that only writes files. ``extracted``: an extract of
    ``config.extract`` made just before, reconciled instead of making one (the benchmark measures the two
    apart). ``tripwire``: the service's shared-BookKeeper tripwire, read and tripped only when ``none`` is
    declared and the run submits (``publish``). ``head``: how the offload candidates' objects are HEADed
    (default :func:`reconcile.candidates.head_owners` on ``s3_client``, or a client from the settings)."""
    console = console or Console(stderr=True)
    config.out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    now_ms = config.now_ms if config.now_ms is not None else int(time.time() * 1000)
    cutoff_ms = now_ms - int(config.min_age_seconds * 1000)
    if extracted is None:
        extracted = _extract(config, console, timings)
    timings.update({f"extract_{k}": v for k, v in extracted.seconds.items()})
    _print_extracted(console, extracted)
    if head is None:

        def head(groups: Sequence[Group]) -> Sequence[OwnersRow]:
            # The client is made only when there is something to HEAD (as before: no S3 needed otherwise).
            return head_owners(s3_client or _s3(config.extract), groups)

    spark = spark or spark_session(config.master, config.shuffle_partitions)
    with _progress(console) as progress, _stage(timings, "reconcile"):
        task = progress.add_task("reconcile (spark)", total=4)
        tables = read_tables(spark, extracted)
        raw = raw_findings(tables, cutoff_ms)
        progress.update(task, advance=1)
        with _stage(timings, "reconcile_head_objects"):  # S3 round trips, apart from Spark's work
            owners = offload_owners(spark, raw, head, config.out / OFFLOAD_OWNERS_PARQUET)
        progress.update(task, advance=1)
        findings, evidence = judged_findings(
            config, tables, raw, owners, now_ms, watching=publish is not None, tripwire=tripwire
        )
        progress.update(task, advance=1)
        aggregates = aggregate(findings)
        progress.update(task, advance=1)
    with _stage(timings, "outputs"):
        written = write_candidates(findings, config.out, config.decided)
        render_chart(aggregates.summary, config.out / REPORT_PNG)
        write_summary(config, cutoff_ms, extracted, aggregates, written, evidence, timings)
    _print_report(console, config, aggregates, written, evidence)
    result = JobResult(
        config.out,
        cutoff_ms,
        extracted,
        written.requests,
        written.rejected,
        aggregates.summary,
        timings,
        report_only=aggregates.report_only,
        legacy_tagged=aggregates.legacy_tagged,
        unproven_offloads=aggregates.unproven_offloads,
        candidate_reasons=aggregates.candidate_reasons,
        shared_bookkeeper_evidence=evidence,
        decided=written.decided,
    )
    _submit(config, result, console, publish, tripwire, timings)
    return result


def _extract(config: JobConfig, console: Console, timings: dict[str, float]) -> ExtractResult:
    """Stage 1: the snapshot of ZooKeeper and the buckets, as Parquet under ``out/extract``."""
    with _progress(console) as progress, _stage(timings, "extract"):
        tasks: dict[str, Any] = {}

        def on_progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(f"extract {stage}", total=total)
            progress.update(tasks[stage], completed=done, total=total)

        return extract_all(config.extract, config.out / "extract", resume=config.resume, progress=on_progress)


def _print_extracted(console: Console, extracted: ExtractResult) -> None:
    console.print(
        "extracted: "
        + ", ".join(
            f"{extracted.rows.get(t, 0)} {t}"
            for t in (BK_LEDGER_IDS, BK_LEDGERS, OFFLOAD_OBJECTS, REFERENCES, OFFLOAD_CONTEXTS)
        )
        + f"; {sum(extracted.zk_requests.values())} ZooKeeper requests"
    )


def read_tables(spark: Any, extracted: ExtractResult) -> Tables:
    """The extract's Parquet, read with the transform's schemas."""
    from reconcile import transform as T

    def read(schema: Any, table: str) -> Any:
        return spark.read.schema(schema).parquet(extracted.path(table))

    return Tables(
        bk=read(T.BK_LEDGERS_SCHEMA, BK_LEDGERS),
        refs=read(T.REFERENCES_SCHEMA, REFERENCES),
        ctxs=read(T.OFFLOAD_CONTEXTS_SCHEMA, OFFLOAD_CONTEXTS),
        objs=read(T.OFFLOAD_OBJECTS_SCHEMA, OFFLOAD_OBJECTS),
        namespaces=read(T.NAMESPACES_SCHEMA, NAMESPACES),
    )


def raw_findings(tables: Tables, cutoff_ms: int) -> Any:
    """Stage 2a: the BK and offload findings before their owners are known (the anti-joins), computed once
    (a local checkpoint): the HEADs and every later step read them."""
    from reconcile import transform as T

    raw = T.bk_findings(tables.bk, tables.refs, tables.ctxs, cutoff_ms=cutoff_ms).unionByName(
        T.offload_findings(tables.objs, tables.refs, tables.ctxs, cutoff_ms=cutoff_ms)
    )
    return raw.localCheckpoint(eager=True)


def offload_owners(
    spark: Any, raw: Any, head: Callable[[Sequence[Group]], Sequence[OwnersRow]], path: Path
) -> Any:
    """Stage 2b: the owners of the offload candidates, from their objects' user metadata (the listing has
    none): their groups streamed from Spark (``toLocalIterator``, a partition at a time) and HEADed in
    batches of :data:`HEAD_BATCH`, each batch's rows appended to ``path`` (Parquet), which Spark reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from reconcile import transform as T

    schema = pa.schema(
        [
            pa.field("bucket", pa.string(), nullable=False),
            pa.field("uuid", pa.string(), nullable=False),
            pa.field("ledger_id", pa.int64()),
            pa.field("managed_ledger", pa.string()),
            pa.field("untagged", pa.bool_()),
            pa.field("conflicting", pa.bool_()),
        ]
    )  # transform.OFFLOAD_OWNERS_SCHEMA, as Parquet
    groups = (
        raw.where((F.col("storage") == "offload") & (F.col("status") == T.CANDIDATE))
        .select("bucket", "uuid", "ledger_id", "keys")
        .toLocalIterator()
    )
    batch: list[Group] = []
    with pq.ParquetWriter(str(path), schema) as writer:

        def flush() -> None:
            rows = head(batch)
            writer.write_table(
                pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)
            )
            batch.clear()

        for r in groups:
            batch.append((r["bucket"], r["uuid"], r["ledger_id"], list(r["keys"])))
            if len(batch) >= HEAD_BATCH:
                flush()
        if batch:
            flush()
    return spark.read.schema(T.OFFLOAD_OWNERS_SCHEMA).parquet(str(path))


def judged_findings(
    config: JobConfig,
    tables: Tables,
    raw: Any,
    owners: Any,
    now_ms: int,
    *,
    watching: bool,
    tripwire: Tripwire | None,
) -> tuple[Any, list[dict[str, Any]]]:
    """Stage 2c: owners attached, the namespaces no store knows judged, the tenant filter; the findings are
    written to ``findings.parquet`` and read back from it. Returns them and the evidence of another writer
    on a shared BookKeeper (``watching``: the run submits)."""
    from reconcile import transform as T

    owned = T.attach_offload_owners(raw, owners, tables.bk, tables.refs)
    # Before the tenant filter: another writer in any tenant means the BookKeeper is shared.
    recent_from_ms = now_ms - int(config.tripwire_window_seconds * 1000)
    evidence = [
        r.asDict()
        for r in T.shared_bookkeeper_evidence(
            owned, tables.namespaces, recent_from_ms=recent_from_ms
        ).collect()
    ]
    # Tripped earlier (by the watcher, the workflow pool, a previous run), it holds until an operator
    # clears it: no ledger of an unknown namespace is requested meanwhile. Read once, here: should it
    # trip while this run goes on, the workflow's own check of it (SKIPPED_UNKNOWN_NAMESPACE) still holds.
    watched = config.bookkeeper_alone is True and watching and tripwire is not None
    already_tripped = watched and tripwire is not None and tripwire.tripped()
    if config.bookkeeper_alone is not True:
        unknown_reason: str | None = T.NAMESPACE_UNKNOWN_REASON
    else:
        unknown_reason = T.SHARED_BOOKKEEPER_REASON if evidence or already_tripped else None
    owned = T.unknown_namespaces(owned, tables.namespaces, unknown_reason)
    findings = T.filter_tenant(owned, config.tenant)
    findings.write.mode("overwrite").parquet(str(config.out / FINDINGS_PARQUET))
    return owned.sparkSession.read.parquet(str(config.out / FINDINGS_PARQUET)), evidence


def _by_reason(findings: Any) -> dict[str, tuple[int, int]]:
    from pyspark.sql import functions as F

    return {
        str(r["reason"]): (int(r["count"]), int(r["bytes"] or 0))
        for r in findings.groupBy("reason")
        .agg(F.count(F.lit(1)).alias("count"), F.sum("bytes").alias("bytes"))
        .collect()
    }


def aggregate(findings: Any) -> Aggregates:
    """Stage 2d: the small aggregates the report, the summary and the console need."""
    from pyspark.sql import functions as F

    from reconcile import transform as T

    unproven = F.col("reason").isin(T.OBJECTS_UNTAGGED_REASON, T.OBJECTS_CONFLICT_REASON)
    return Aggregates(
        summary=rows_from_summary(r.asDict() for r in T.summarize(findings).collect()),
        report_only=_by_reason(findings.where(F.col("status") == T.REPORT_ONLY)),
        candidate_reasons=_by_reason(
            findings.where((F.col("status") == T.CANDIDATE) & F.col("reason").isNotNull())
        ),
        legacy_tagged=[
            r.asDict()
            for r in findings.where(F.col("reason") == T.LEGACY_TAGS_REASON)
            .select("ledger_id", "component", "topic_name", "cursor_name", "bytes")
            .orderBy("ledger_id")
            .limit(LEGACY_LISTED)
            .collect()
        ],
        unproven_offloads=[
            r.asDict()
            for r in findings.where(unproven)
            .select("reason", "bucket", "keys", "ledger_id", "topic_name", "bytes")
            .orderBy("bucket", "uuid", "ledger_id")
            .limit(UNPROVEN_LISTED)
            .collect()
        ],
    )


def write_candidates(findings: Any, out: Path, decided: Mapping[tuple[str, int], Decided]) -> Written:
    """Stage 3a: ``candidates.jsonl`` and ``candidates.avro``, ordered by request type and ledger id, the
    candidates streamed from Spark a partition at a time (never collected whole)."""
    from pyspark.sql import functions as F

    from reconcile import transform as T

    rows = (
        findings.where(F.col("status") == T.CANDIDATE)
        .orderBy("ledger_type", "ledger_id", "bucket", "uuid")
        .toLocalIterator()
    )
    return write_requests((r.asDict() for r in rows), out / CANDIDATES_JSONL, out / CANDIDATES_AVRO, decided)


def write_summary(
    config: JobConfig,
    cutoff_ms: int,
    extracted: ExtractResult,
    aggregates: Aggregates,
    written: Written,
    evidence: list[dict[str, Any]],
    timings: dict[str, float],
) -> None:
    """Stage 3b: ``summary.json``."""
    decided = written.decided
    (config.out / SUMMARY_JSON).write_text(
        json.dumps(
            {
                "cutoff_ms": cutoff_ms,
                "tenant": config.tenant,
                "extracted_rows": extracted.rows,
                "zookeeper_requests": extracted.zk_requests,
                "totals": {k: {"count": c, "bytes": b} for k, (c, b) in totals(aggregates.summary).items()},
                "requests": written.requests,
                "already_decided": {
                    "by_outcome": dict(sorted(Counter(d.outcome for d in decided).items())),
                    "candidates": [d.as_json() for d in decided[:DECIDED_LISTED]],
                },
                "candidate_reasons": {
                    reason: {"count": c, "bytes": b}
                    for reason, (c, b) in sorted(aggregates.candidate_reasons.items())
                },
                "report_only": {
                    reason: {"count": c, "bytes": b, "why": REPORT_ONLY_WHY.get(reason, reason)}
                    for reason, (c, b) in sorted(aggregates.report_only.items())
                },
                "legacy_tagged": aggregates.legacy_tagged,
                "unproven_offloads": aggregates.unproven_offloads,
                "shared_bookkeeper": {
                    "alone": config.bookkeeper_alone,
                    "other_stores": list(config.extract.other_pulsar_metadata_stores),
                    "tripwire_window_seconds": config.tripwire_window_seconds,
                    "evidence": evidence,
                },
                "rejected": [
                    {"ledger_id": r.finding.get("ledger_id"), "reason": r.reason} for r in written.rejected
                ],
                "timings_seconds": {k: round(v, 3) for k, v in timings.items()},
            },
            indent=2,
        )
    )


def _print_report(
    console: Console,
    config: JobConfig,
    aggregates: Aggregates,
    written: Written,
    evidence: list[dict[str, Any]],
) -> None:
    from reconcile import transform as T

    report_only, legacy_tagged = aggregates.report_only, aggregates.legacy_tagged
    unproven_offloads, decided = aggregates.unproven_offloads, written.decided
    console.print(render_table(aggregates.summary))
    for item in written.rejected[:20]:
        console.print(
            f"[yellow]not a valid request, left out:[/yellow] {item.finding.get('ledger_id')}: {item.reason}"
        )
    for reason, (count, size) in sorted(aggregates.candidate_reasons.items()):
        console.print(f"candidates ({reason}): {count} orphans, {human_bytes(size)}")
    for reason, (count, size) in sorted(report_only.items()):
        console.print(
            f"[yellow]not submitted ({reason}):[/yellow] {count} orphans, {human_bytes(size)}: "
            f"{REPORT_ONLY_WHY.get(reason, reason)}"
        )
    if legacy_tagged:
        ids = ", ".join(str(r["ledger_id"]) for r in legacy_tagged[:20])
        more = " ..." if report_only.get(T.LEGACY_TAGS_REASON, (0, 0))[0] > 20 else ""
        console.print(
            f"  legacy-tagged ledgers: {ids}{more} "
            f"({SUMMARY_JSON} lists up to {LEGACY_LISTED}, {FINDINGS_PARQUET} has all)"
        )
    if unproven_offloads:
        keys = ", ".join(f"s3://{r['bucket']}/{r['keys'][0]}" for r in unproven_offloads[:5])
        more = " ..." if len(unproven_offloads) > 5 else ""
        console.print(
            f"  offloads to check by hand: {keys}{more} "
            f"({SUMMARY_JSON} lists up to {UNPROVEN_LISTED} with their keys, {FINDINGS_PARQUET} has all)"
        )
    if decided:
        counts = ", ".join(f"{o} {n}" for o, n in sorted(Counter(d.outcome for d in decided).items()))
        kept = [d for d in decided if d.outcome != "DELETED"][:10]
        console.print(
            f"[yellow]decided before (audit log):[/yellow] {len(decided)} candidates: {counts}"
            + ("; kept: " + ", ".join(f"{d.ledger_id} {d.outcome}" for d in kept) if kept else "")
            + f" ({SUMMARY_JSON} lists up to {DECIDED_LISTED} with the reasons)"
        )
    for row in evidence:
        console.print(
            f"[yellow]namespace {escape(str(row['namespace']))} is known to no metadata store read[/yellow],"
            f" yet {row['ledgers']} of its ledgers were created in the last "
            f"{config.tripwire_window_seconds:.0f} s (newest {row['newest_ledger_id']}): another Pulsar "
            "cluster writes to this BookKeeper"
        )


def _submit(
    config: JobConfig,
    result: JobResult,
    console: Console,
    publish: Callable[[Sequence[Any]], int] | None,
    tripwire: Tripwire | None,
    timings: dict[str, float],
) -> None:
    """Stage 4: trip the tripwire on evidence, publish the requests of ``candidates.jsonl``."""
    if publish is not None and config.bookkeeper_alone is True and result.shared_bookkeeper_evidence:
        # ``none`` asserted this cluster alone writes here, and the ledgers say otherwise: trip the service's
        # tripwire (durably, before anything is published), which stops its own unknown-namespace deletes;
        # the requests above already hold none of them.
        if tripwire is not None:
            tripwire.trip(result.shared_bookkeeper_evidence)
        result.tripped = True
    jsonl = config.out / CANDIDATES_JSONL
    if publish is not None and result.candidates:
        with _stage(timings, "submit"):
            result.published = publish(RequestsFile(jsonl, result.candidates))
        console.print(f"published {result.published} requests to the deletion topic")
    else:
        console.print(
            f"dry run: {result.candidates} requests written to {jsonl}; "
            "nothing published (use --submit, or `ledger-deletion submit --jsonl` later)"
        )


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def _s3(config: ExtractConfig) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=config.s3_endpoint or None, region_name=config.s3_region)
