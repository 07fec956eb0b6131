"""Reading the audit log back: every record once, filtered as ``ledger-deletion audit`` asks, and summed.

Records are read with pyarrow from the date partitions the query's ``since`` leaves in (a day's objects are
read in parallel). A record written twice (its ack retried after the write) appears once: rows are kept by
``record_id``, the earliest written first.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq

from ledger_deletion.audit.record import RECLAIMED_OUTCOMES, AuditRecord, from_table
from ledger_deletion.audit.store import AuditStore
from ledger_deletion.errors import InvalidRequestError

_AGO = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """``7d``, ``12h``, ``30m`` (ago), a date (``2026-11-28``, UTC midnight) or an ISO 8601 time."""
    now = now or datetime.now(UTC)
    match = _AGO.match(value.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidRequestError(
            f"--since {value!r}: give a duration ago (7d, 12h, 30m) or a date or time (2026-11-28)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class AuditQuery:
    ledger: int | None = None
    topic: str | None = None
    namespace: str | None = None
    outcome: str | None = None
    source: str | None = None
    since: datetime | None = None

    def matches(self, record: AuditRecord) -> bool:
        when = record.decided_at or record.written_at
        return (
            (self.ledger is None or record.ledger_id == self.ledger)
            and (self.topic is None or record.topic == self.topic)
            and (self.namespace is None or record.namespace == self.namespace)
            and (self.outcome is None or record.outcome == self.outcome.upper())
            and (self.source is None or record.source == self.source)
            and (self.since is None or (when is not None and when >= self.since))
        )


def read(store: AuditStore, query: AuditQuery = AuditQuery(), *, threads: int = 8) -> list[AuditRecord]:
    """Every record the query matches, once each, oldest decision first."""
    first_day = query.since.strftime("%Y-%m-%d") if query.since else ""
    keys = [key for day in store.days() if day >= first_day for key in store.keys(day)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        tables = list(pool.map(lambda key: pq.read_table(io.BytesIO(store.get(key))), keys))
    return select(unique(r for table in tables for r in from_table(table)), query)


def unique(records: Iterable[AuditRecord]) -> list[AuditRecord]:
    """One row per record id, the earliest written."""
    kept: dict[str, AuditRecord] = {}
    epoch = datetime.min.replace(tzinfo=UTC)
    for record in sorted(records, key=lambda r: r.written_at or epoch):
        kept.setdefault(record.record_id, record)
    return list(kept.values())


def select(records: Iterable[AuditRecord], query: AuditQuery) -> list[AuditRecord]:
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(
        (r for r in records if query.matches(r)),
        key=lambda r: (r.decided_at or r.written_at or epoch, r.record_id),
    )


@dataclass
class SummaryRow:
    """What one namespace's decisions of one day came to."""

    namespace: str
    day: str
    records: int = 0
    reclaimed_bytes: int = 0
    by_outcome: dict[str, int] = field(default_factory=dict)

    @property
    def deleted(self) -> int:
        return sum(n for outcome, n in self.by_outcome.items() if outcome in RECLAIMED_OUTCOMES)


def summarize(records: Sequence[AuditRecord]) -> list[SummaryRow]:
    rows: dict[tuple[str, str], SummaryRow] = {}
    for record in records:
        key = (record.namespace, record.day)
        row = rows.setdefault(key, SummaryRow(record.namespace, record.day))
        row.records += 1
        row.by_outcome[record.outcome] = row.by_outcome.get(record.outcome, 0) + 1
        if record.outcome in RECLAIMED_OUTCOMES:
            row.reclaimed_bytes += record.bytes
    return [rows[key] for key in sorted(rows)]


def latest_by_ledger(records: Iterable[AuditRecord]) -> dict[tuple[str, int], AuditRecord]:
    """The latest decision per (request type, ledger id): what reconcile's report marks candidates with."""
    out: dict[tuple[str, int], AuditRecord] = {}
    epoch = datetime.min.replace(tzinfo=UTC)
    for record in sorted(records, key=lambda r: r.decided_at or r.written_at or epoch):
        out[(record.request_type, record.ledger_id)] = record
    return out


def render_chart(
    rows: Sequence[SummaryRow], path: Path, title: str = "Reclaimed by the deletion service"
) -> None:
    """Bytes reclaimed per day, stacked by namespace, beside the count of deletions (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reconcile.report import human_bytes

    days = sorted({r.day for r in rows}) or ["(none)"]
    namespaces = sorted({r.namespace for r in rows})
    size: dict[str, dict[str, int]] = defaultdict(dict)
    count: dict[str, dict[str, int]] = defaultdict(dict)
    for r in rows:
        size[r.namespace][r.day] = r.reclaimed_bytes
        count[r.namespace][r.day] = r.deleted
    fig, (ax_bytes, ax_count) = plt.subplots(1, 2, figsize=(13, 4.5))
    positions = list(range(len(days)))
    for ax, data, label in ((ax_bytes, size, "reclaimed bytes"), (ax_count, count, "ledgers deleted")):
        bottom = [0.0] * len(days)
        for namespace in namespaces:
            values = [float(data[namespace].get(day, 0)) for day in days]
            if any(values):
                ax.bar(positions, values, bottom=bottom, label=namespace)
                bottom = [a + b for a, b in zip(bottom, values, strict=True)]
        ax.set_ylabel(label)
        ax.set_xticks(positions, days, rotation=30, ha="right")
        ax.grid(axis="y", alpha=0.3)
    ax_bytes.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: human_bytes(v)))
    handles, labels = ax_bytes.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, labels, loc="lower center", ncol=min(len(handles), 4), fontsize="small", frameon=False
        )
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
