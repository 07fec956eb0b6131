"""``ledger-deletion reconcile``: find existing orphans and (with ``--submit``) hand them to the service.

The lead's CLI mounts :func:`reconcile` as a command (``app.command(name="reconcile")(reconcile)``). Settings
(ZooKeeper, ledgers root, Pulsar's metadata store, S3 endpoint, offload bucket) come from the environment as
for every command.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ledger_deletion.settings import Settings
    from ledger_deletion.tripwire import TripState
    from reconcile.candidates import Decided

__all__ = ["TemporalTripwire", "audit_decisions", "reconcile", "run_from_settings"]

_LOOPBACK = ("http://127.0.0.1", "http://localhost")
SEEN_BY = "ledger-deletion reconcile"


class TemporalTripwire:
    """:class:`reconcile.job.Tripwire` on the service's own shared-BookKeeper tripwire
    (``ledger_deletion.tripwire``: the Temporal Schedule ``<prefix>-shared-bookkeeper-tripwire``, paused when
    tripped), which the workflow pool, the watcher and reconcile all read and trip."""

    def __init__(self, settings: Settings) -> None:
        from ledger_deletion.tripwire import tripwire_id

        self._settings = settings
        self.id = tripwire_id(settings.task_queue_prefix)

    def tripped(self) -> bool:
        return self._run(self._read()).tripped

    def trip(self, evidence: Sequence[dict[str, Any]]) -> None:
        """One trip per namespace, with its newest ledger (``tripwire.trip`` logs one line per namespace)."""
        self._run(self._trip(evidence))

    def _run(self, work: Any) -> TripState:
        from ledger_deletion.errors import TripwireStateUnknown

        try:
            state: TripState = asyncio.run(work)
        except Exception as exc:
            # Neither "tripped" nor "not tripped" may be assumed: the run stops before it submits.
            raise TripwireStateUnknown(
                f"the shared-BookKeeper tripwire {self.id} could not be read or tripped: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return state

    async def _read(self) -> TripState:
        from ledger_deletion import tripwire
        from ledger_deletion.temporal_client import connect_temporal

        return await tripwire.read(await connect_temporal(self._settings), self.id)

    async def _trip(self, evidence: Sequence[dict[str, Any]]) -> TripState:
        from ledger_deletion import tripwire
        from ledger_deletion.temporal_client import connect_temporal

        client = await connect_temporal(self._settings)
        state = await tripwire.read(client, self.id)
        for row in evidence:
            seen = tripwire.Evidence(
                str(row["namespace"]), int(row["newest_ledger_id"]), int(row["newest_created_ms"]), SEEN_BY
            )
            state = await tripwire.trip(client, self.id, seen, SEEN_BY)
        return state


def run_from_settings(
    *,
    master: str | None,
    min_age: str,
    tenant: str | None,
    out: Path,
    submit: bool,
    resume: bool = False,
    extract_workers: int = 2,
    extra_buckets: tuple[str, ...] = (),
) -> int:
    from ledger_deletion.connections import zookeeper_digest, zookeeper_security
    from ledger_deletion.errors import ConfigurationError, PulsarMetadataNotFound, TripwireStateUnknown
    from ledger_deletion.loading import load_settings
    from reconcile.extract import ExtractConfig
    from reconcile.job import JobConfig, parse_duration, run

    console = Console(stderr=True)
    try:
        min_age_seconds = parse_duration(min_age)
    except ValueError as exc:
        console.print(f"[red]--min-age:[/red] {exc}")
        return 2
    # It only reads ZooKeeper and S3 (and may publish requests): the deleting logins are refused.
    settings = load_settings(
        # Submitting requests deletes: it must be told whether this BookKeeper is shared.
        require=("zookeeper", "s3_endpoint", *(("pulsar_url", "bookkeeper_shared_with") if submit else ())),
        deletes=(),
    )
    if (settings.s3_endpoint or "").startswith(_LOOPBACK):
        # The embedded stack's moto accepts any credentials; boto3 only needs some to sign requests.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    # Unset (a dry run only): no other store is read, and no ledger of a namespace ours does not know is a
    # candidate, as when stores are declared (JobConfig.bookkeeper_alone).
    shared = settings.shared_bookkeeper if settings.bookkeeper_shared_with else None
    tripwire = None
    if submit and shared is not None and shared.alone:
        # `none`: the tripwire is read before, and tripped on evidence before, anything is submitted.
        if not settings.temporal_address:
            console.print(
                "[red]refused:[/red] with LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none, --submit reads and "
                "trips the shared-BookKeeper tripwire in Temporal: set TEMPORAL_ADDRESS"
            )
            return 2
        tripwire = TemporalTripwire(settings)
    config = JobConfig(
        extract=ExtractConfig(
            zookeeper=settings.zookeeper,
            ledgers_root=settings.bk_ledgers_root,
            s3_endpoint=settings.s3_endpoint or None,
            s3_region=settings.s3_region,
            buckets=tuple(dict.fromkeys((settings.offload_bucket, *extra_buckets))),
            workers=extract_workers,
            zk_timeout=settings.zookeeper_timeout_seconds,
            zk_auth_digest=zookeeper_digest(settings),
            pulsar_metadata_zookeeper=settings.pulsar_metadata_hosts,
            pulsar_metadata_auth_digest=zookeeper_digest(settings, pulsar_metadata=True),
            zk_security=zookeeper_security(settings),
            pulsar_metadata_zk_security=zookeeper_security(settings, pulsar_metadata=True),
            other_pulsar_metadata_stores=shared.other_stores if shared else (),
        ),
        bookkeeper_alone=shared.alone if shared else None,
        out=out,
        min_age_seconds=min_age_seconds,
        tenant=tenant,
        master=master,
        resume=resume,
        decided=audit_decisions(settings, console),
    )
    publish = None
    if submit:
        from ledger_deletion.submit import publish_requests

        def publish(requests: object) -> int:
            return publish_requests(settings, requests, progress=True)  # type: ignore[arg-type]

    try:
        result = run(config, console=console, publish=publish, tripwire=tripwire)
    except (ConfigurationError, PulsarMetadataNotFound, TripwireStateUnknown) as exc:
        # Settings that cannot give a true report (e.g. Pulsar's metadata read from the wrong store): the
        # job stopped before writing candidates or publishing; exit as for any other bad input.
        console.print(f"[red]refused:[/red] {escape(str(exc))}")  # "[/chroot]" is no markup
        return 2
    return 1 if result.rejected else 0


def audit_decisions(settings: Settings, console: Console) -> dict[tuple[str, int], Decided]:
    """The service's latest live decision per ledger, from its audit log (none without an audit bucket):
    what reconcile's report marks its candidates with. Unreadable, the report says so and goes on."""
    from ledger_deletion.audit.reader import latest_by_ledger, read
    from ledger_deletion.audit.store import AuditStore
    from ledger_deletion.errors import LedgerDeletionError
    from reconcile.candidates import Decided

    if not settings.audit_bucket:
        return {}
    try:
        records = [r for r in read(AuditStore.from_settings(settings)) if r.mode == "live"]
    except LedgerDeletionError as exc:
        console.print(f"[yellow]audit log not read, candidates not marked:[/yellow] {escape(str(exc))}")
        return {}
    return {
        key: Decided(r.request_type, r.ledger_id, r.outcome, r.reason, str(r.decided_at or ""))
        for key, r in latest_by_ledger(records).items()
    }


def reconcile(
    master: Annotated[
        str, typer.Option(help="Spark master URL (local[*], spark://host:7077, k8s://...).")
    ] = "local[*]",
    min_age: Annotated[
        str, typer.Option("--min-age", help="Only ledgers/objects older than this (s, m, h, d), e.g. 24h.")
    ] = "24h",
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's orphans.")] = None,
    out: Annotated[
        Path, typer.Option(help="Directory for candidates.jsonl/.avro, findings.parquet, report.png.")
    ] = Path("reconcile-out"),
    submit: Annotated[
        bool,
        typer.Option(
            "--submit/--dry-run", help="Publish the candidates to the deletion topic (default: dry run)."
        ),
    ] = False,
    resume: Annotated[
        bool, typer.Option(help="Keep the extract parts already in OUT/extract (restart).")
    ] = False,
    extract_workers: Annotated[
        int, typer.Option(help="Processes scanning ZooKeeper and S3 in parallel.")
    ] = 2,
    bucket: Annotated[
        list[str] | None,
        typer.Option(help="Another offload bucket to list (repeatable); the configured one always."),
    ] = None,
) -> None:
    """Find orphaned ledgers that exist already (BookKeeper and tiered storage) with Spark.

    Extracts BK ledger metadata, Pulsar metadata and the offload bucket listing to Parquet, anti-joins storage
    against every reference, keeps only Pulsar ledgers older than --min-age, and writes candidates.jsonl
    (input of `ledger-deletion submit --jsonl`), candidates.avro, findings.parquet and report.png into --out.
    Nothing is published without --submit; every published request still passes all checks of the service.
    """
    code = run_from_settings(
        master=master,
        min_age=min_age,
        tenant=tenant,
        out=out,
        submit=submit,
        resume=resume,
        extract_workers=extract_workers,
        extra_buckets=tuple(bucket or ()),
    )
    if code:
        raise typer.Exit(code)
