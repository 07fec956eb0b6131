"""``ledger-deletion audit``: what the service decided, read from its audit log in object storage.

The log outlives Temporal's retention: every decided request has a record there, written before its message
was acked (``ledger_deletion/audit``). Settings are read once here, at the edge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from ledger_deletion.errors import ConfigurationError, LedgerDeletionError
from ledger_deletion.loading import load_settings
from ledger_deletion.ops.options import Output, OutputOption

if TYPE_CHECKING:
    from ledger_deletion.audit.reader import SummaryRow

errors = Console(stderr=True)
DEFAULT_CHART = Path("audit-summary.png")


def audit(
    ledger: Annotated[int | None, typer.Option("--ledger", help="Only this ledger id.")] = None,
    topic: Annotated[
        str | None, typer.Option("--topic", help="Exact topic name, e.g. persistent://public/default/orders.")
    ] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="tenant/namespace.")] = None,
    outcome: Annotated[
        str | None,
        typer.Option("--outcome", help="DELETED, ALREADY_DELETED, SKIPPED_*, DEAD_LETTERED, WOULD_*."),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="Who sent the request: broker, watcher, reconcile, submit.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Decided since: 7d, 12h, 30m ago, or a date or ISO time.")
    ] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="Reclaimed bytes and counts per namespace and day, and a chart.")
    ] = False,
    chart: Annotated[
        Path, typer.Option("--chart", help="With --summary: where to write the PNG chart.")
    ] = DEFAULT_CHART,
    limit: Annotated[int, typer.Option(help="At most this many records in the table (newest).")] = 200,
    output: OutputOption = Output.table,
) -> None:
    """The audit log: one record per decided request (live and shadow, every outcome), with its evidence.

    Read from LEDGER_DELETION_AUDIT_BUCKET under LEDGER_DELETION_AUDIT_PREFIX (date-partitioned Parquet that
    Spark, DuckDB or pyarrow read directly). A record written twice is shown once.
    """
    from ledger_deletion.audit.reader import AuditQuery, parse_since, read, render_chart, summarize
    from ledger_deletion.audit.store import AuditStore

    settings = load_settings()
    try:
        if not settings.audit_bucket:
            raise ConfigurationError("LEDGER_DELETION_AUDIT_BUCKET is not set: there is no audit log to read")
        query = AuditQuery(ledger, topic, namespace, outcome, source, parse_since(since) if since else None)
        records = read(AuditStore.from_settings(settings), query)
    except LedgerDeletionError as exc:
        errors.print(f"[red]audit:[/red] {exc}")
        raise typer.Exit(2) from None
    if summary:
        rows = summarize(records)
        if output is Output.json:
            print(json.dumps([row.__dict__ | {"deleted": row.deleted} for row in rows], indent=2))
        else:
            Console().print(summary_table(rows))
        try:
            render_chart(rows, chart)
            errors.print(f"chart: {chart}")
        except ImportError:  # matplotlib comes with the spark extra
            errors.print(
                "[yellow]no chart: matplotlib is not installed (pip install 'ledger-deletion[spark]')"
            )
        return
    if output is Output.json:
        print(json.dumps([r.as_json() for r in records], indent=2, default=str))
        return
    shown = records[-limit:] if limit else records
    table = Table(
        title=f"audit log: {len(records)} record(s)"
        + (f", newest {limit}" if len(shown) < len(records) else "")
    )
    for column in ("decided", "outcome", "mode", "ledger", "type", "topic", "source", "bytes", "reason"):
        table.add_column(
            column, overflow="fold", justify="right" if column in ("ledger", "bytes") else "left"
        )
    for r in shown:
        table.add_row(
            r.decided_at.strftime("%Y-%m-%d %H:%M:%S") if r.decided_at else "",
            r.outcome,
            r.mode,
            str(r.ledger_id),
            r.request_type,
            r.topic,
            r.source,
            _bytes(r.bytes) if r.bytes else "",
            r.reason[:120],
        )
    Console().print(table)


def summary_table(rows: Sequence[SummaryRow]) -> Table:
    table = Table(title="reclaimed per namespace and day (audit log)", show_footer=True)
    total_bytes = sum(r.reclaimed_bytes for r in rows)
    table.add_column("day", footer="total")
    table.add_column("namespace", overflow="fold")
    table.add_column("deleted", justify="right", footer=str(sum(r.deleted for r in rows)))
    table.add_column("reclaimed", justify="right", footer=_bytes(total_bytes))
    table.add_column("decided", justify="right", footer=str(sum(r.records for r in rows)))
    table.add_column("outcomes", overflow="fold")
    for r in sorted(rows, key=lambda row: (row.day, row.namespace)):
        table.add_row(
            r.day,
            r.namespace,
            str(r.deleted),
            _bytes(r.reclaimed_bytes),
            str(r.records),
            ", ".join(f"{o} {n}" for o, n in sorted(r.by_outcome.items())),
        )
    return table


def _bytes(count: int) -> str:
    from reconcile.report import human_bytes

    return human_bytes(count)
