"""The report: counts and reclaimable bytes of the orphans by tenant, namespace and component.

Input is the collected :func:`reconcile.transform.summarize` table (a few rows per namespace); output is a
rich table for the terminal and a PNG chart (matplotlib, Agg backend: no display needed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["ReportRow", "human_bytes", "render_chart", "render_table", "rows_from_summary", "totals"]

COMPONENTS = ("data", "cursor", "schema", "compacted", "unknown")
_COLORS = {
    "data": "#4C78A8",
    "cursor": "#F58518",
    "schema": "#54A24B",
    "compacted": "#B279A2",
    "unknown": "#9D9D9D",
}


@dataclass(frozen=True)
class ReportRow:
    tenant: str
    namespace: str
    component: str
    storage: str
    status: str
    count: int
    bytes: int


def rows_from_summary(rows: Iterable[Mapping[str, Any]]) -> list[ReportRow]:
    return [
        ReportRow(
            tenant=row["tenant"] or "(unknown)",
            namespace=row["namespace"] or "(unknown)",
            component=row["component"] or "unknown",
            storage=row["storage"],
            status=row["status"],
            count=int(row["count"]),
            bytes=int(row["bytes"] or 0),
        )
        for row in rows
    ]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover - loop always returns


def totals(rows: Sequence[ReportRow]) -> dict[str, tuple[int, int]]:
    """(count, bytes) per status."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        count, size = out.get(row.status, (0, 0))
        out[row.status] = (count + row.count, size + row.bytes)
    return out


def render_table(rows: Sequence[ReportRow], title: str = "Orphans found") -> Table:
    """One line per (namespace, component, storage): candidates (count, bytes), report-only, excluded."""
    cells: dict[tuple[str, str, str], dict[str, tuple[int, int]]] = defaultdict(dict)
    for row in rows:
        key = (row.namespace, row.component, row.storage)
        count, size = cells[key].get(row.status, (0, 0))
        cells[key][row.status] = (count + row.count, size + row.bytes)
    sums = totals(rows)
    table = Table(title=title, show_footer=True)
    table.add_column("namespace", footer="total", overflow="fold")
    table.add_column("component")
    table.add_column("storage")
    table.add_column("candidates", justify="right", footer=str(sums.get("candidate", (0, 0))[0]))
    table.add_column("bytes", justify="right", footer=human_bytes(sums.get("candidate", (0, 0))[1]))
    table.add_column("report-only", justify="right", footer=str(sums.get("report-only", (0, 0))[0]))
    table.add_column("excluded", justify="right", footer=str(sums.get("excluded", (0, 0))[0]))
    for (namespace, component, storage), by_status in sorted(cells.items()):
        count, size = by_status.get("candidate", (0, 0))
        table.add_row(
            namespace,
            component,
            "bk" if storage == "bookkeeper" else storage,
            str(count) if count else "",
            human_bytes(size) if count else "",
            str(by_status.get("report-only", (0, 0))[0] or ""),
            str(by_status.get("excluded", (0, 0))[0] or ""),
        )
    return table


def render_chart(rows: Sequence[ReportRow], path: Path, title: str = "Reclaimable by namespace") -> None:
    """Two stacked horizontal bar charts (candidates + report-only): orphan count and bytes by component."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    orphans = [r for r in rows if r.status in ("candidate", "report-only")]
    namespaces = sorted({f"{r.namespace}" for r in orphans}) or ["(none)"]
    count: dict[str, dict[str, int]] = {c: defaultdict(int) for c in COMPONENTS}
    size: dict[str, dict[str, int]] = {c: defaultdict(int) for c in COMPONENTS}
    for r in orphans:
        component = r.component if r.component in COMPONENTS else "unknown"
        count[component][r.namespace] += r.count
        size[component][r.namespace] += r.bytes
    height = max(3.0, 0.35 * len(namespaces) + 1.5)
    fig, (ax_count, ax_bytes) = plt.subplots(1, 2, figsize=(13, height), sharey=True)
    positions = list(range(len(namespaces)))
    for ax, data, label in ((ax_count, count, "orphans"), (ax_bytes, size, "reclaimable bytes")):
        left = [0.0] * len(namespaces)
        for component in COMPONENTS:
            values = [float(data[component].get(ns, 0)) for ns in namespaces]
            if any(values):
                ax.barh(positions, values, left=left, label=component, color=_COLORS[component])
                left = [a + b for a, b in zip(left, values, strict=True)]
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    ax_bytes.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: human_bytes(v)))
    ax_count.set_yticks(positions, namespaces)
    ax_count.invert_yaxis()
    handles, labels = ax_count.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize="small", frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
