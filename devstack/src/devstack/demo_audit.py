"""The demo's last step: what the audit log kept of the run, as `ledger-deletion audit --summary` shows."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from devstack.scenario import Case
from ledger_deletion.audit.reader import AuditQuery, read, render_chart, summarize
from ledger_deletion.audit.store import AuditStore
from ledger_deletion.ops.audit import summary_table
from ledger_deletion.settings import Settings


async def show_audit(console: Console, settings: Settings, namespace: str, cases: Sequence[Case]) -> bool:
    """Print the run's summary from the audit log; True when every request the live pools decided for the
    namespace has its live record (each ledger of the scenario: recorded before its ack)."""
    store = AuditStore.from_settings(settings)
    records = await asyncio.to_thread(read, store, AuditQuery(namespace=namespace))
    rows = summarize(records)
    console.print(summary_table(rows))
    chart = Path(tempfile.gettempdir()) / f"ledger-deletion-audit-{namespace.replace('/', '-')}.png"
    await asyncio.to_thread(render_chart, rows, chart)
    live = {r.ledger_id for r in records if r.mode == "live"}
    missing = sorted({c.request.ledger_id for c in cases} - live)
    shadow = sum(r.mode == "shadow" for r in records)
    console.print(
        f"{len(records)} records ({shadow} shadow) in s3://{store.bucket}/{store.prefix}, chart {chart}\n"
        f"[dim]the same table: ledger-deletion audit --summary --namespace {namespace}[/dim]"
    )
    ok = not missing
    mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
    console.print(
        f"{mark} every live decision in the audit log"
        + (f"; missing ledgers {', '.join(map(str, missing))}" if missing else f": {len(live)} ledgers")
    )
    return ok
