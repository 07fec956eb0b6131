"""The tables printed at the end of a benchmark run.

First the counts, which do not scatter: per ledger and per shape, what A's workflow runs cost in Temporal
(from their histories) and how often B's messages were delivered. Then CPU per message of every process, A's
and B's side by side, each as a share of B's whole. Throughput last: it depends on the machine and its load
and is not a target.
"""

from __future__ import annotations

import math
from typing import Any

from bench.mix import SHAPES
from bench.server_metrics import totals

# The shape table's count columns: header, key in ``histories.Counts``, format.
COUNT_COLUMNS = (
    ("events", "events", "{:.1f}"),
    ("wf tasks", "workflow_tasks", "{:.2f}"),
    ("act tasks", "activity_tasks", "{:.2f}"),
    ("markers", "markers", "{:.2f}"),
    ("timers", "timers", "{:.2f}"),
    ("signals", "signals", "{:.2f}"),
    ("actions", "actions", "{:.2f}"),
    ("transit", "transitions", "{:.1f}"),
    ("KB hist", "history_bytes", "{:.1f}"),
)
SERVERS = {
    "temporal": "Temporal server",
    "zookeeper": "ZooKeeper",
    "s3": "S3 (moto)",
    "admin": "admin REST emulator",
    "pulsar": "pulsar-lite",
}
POOLS = ("workflow", "pulsar", "bookkeeper", "offload", "all")


def _cell(key: str, value: float, fmt: str) -> str:
    return fmt.format(value / 1024 if key == "history_bytes" else value)


def shape_lines(a: dict[str, Any], b: dict[str, Any] | None) -> list[str]:
    """Per ledger of each shape: A's counts (from the histories) and B's deliveries; then all, per message."""
    width = 40
    header = f"{'shape (per ledger)':<{width}} {'ledgers':>7} {'msgs':>5}"
    header += "".join(f" {title:>9}" for title, _, _ in COUNT_COLUMNS) + f" {'typical':>8} {'B deliv':>8}"
    lines = [header]
    b_shapes = (b or {}).get("shapes", {})

    def row(
        label: str,
        ledgers: int,
        messages: int,
        counts: dict[str, int],
        per: int,
        typical: list[int],
        deliveries: float,
    ) -> str:
        cells = "".join(f" {_cell(key, counts.get(key, 0) / per, fmt):>9}" for _, key, fmt in COUNT_COLUMNS)
        usual = "/".join(map(str, typical)) or "-"
        b_cell = f"{deliveries:.2f}" if b else "-"
        return f"{label[:width]:<{width}} {ledgers:>7} {messages:>5}{cells} {usual:>8} {b_cell:>8}"

    for shape in SHAPES:
        got = a["shapes"].get(shape)
        if not got:
            continue
        b_row = b_shapes.get(shape, {})
        deliveries = b_row.get("deliveries", 0) / max(1, b_row.get("ledgers", 0))
        typical = got.get("typical", [])
        lines.append(
            row(shape, got["ledgers"], got["messages"], got["counts"], got["ledgers"], typical, deliveries)
        )
    ledgers = sum(s["ledgers"] for s in a["shapes"].values())
    per_message = (b or {}).get("deliveries", 0) / max(1, (b or {}).get("n", 0))
    lines.append(row("all, per message", ledgers, a["n"], a["totals"], a["n"], [], per_message))
    return lines


def cpu_rows(a: dict[str, Any], b: dict[str, Any] | None) -> list[tuple[str, float, float]]:
    """(process, A's CPU ms per message, B's), pools and stand-ins; NaN where a side has no such process."""
    nan = math.nan
    pools: dict[str, float] = {}
    for name, stats in a["procs"].items():
        pool = next((p for p in POOLS if f"-{p}-" in f"{name}-"), name)
        pools[pool] = pools.get(pool, 0.0) + stats["cpu_s"]
    rows = [(f"{pool} pool", cpu * 1000 / a["n"], nan) for pool, cpu in pools.items()]
    if b:
        rows.append(("B: PIP-186 consumer", nan, b["cpu_s"] * 1000 / b["n"]))
    b_servers = (b or {}).get("servers_cpu", {})
    for name, label in SERVERS.items():
        a_cpu = a["servers_cpu"].get(name)
        b_cpu = b_servers.get(name)
        if a_cpu is None and b_cpu is None:
            continue
        rows.append(
            (
                label,
                a_cpu * 1000 / a["n"] if a_cpu is not None else nan,
                b_cpu * 1000 / b["n"] if b and b_cpu is not None else nan,
            )
        )
    return rows


def _total(values: list[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) if present else math.nan


def cpu_lines(a: dict[str, Any], b: dict[str, Any] | None) -> list[str]:
    rows = cpu_rows(a, b)
    a_total = _total([r[1] for r in rows])
    b_total = _total([r[2] for r in rows]) if b else math.nan
    lines = [f"{'CPU ms per message, from /proc':<40} {'A':>8} {'B':>8} {'÷ B total':>10}"]

    def fmt(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.2f}"

    for label, a_ms, b_ms in rows:
        lines.append(f"  {label:<38} {fmt(a_ms):>8} {fmt(b_ms):>8} {fmt(a_ms / b_total):>10}")
    lines.append(f"  {'total':<38} {fmt(a_total):>8} {fmt(b_total):>8} {fmt(a_total / b_total):>10}")
    return lines


def server_work_lines(work: dict[str, float], top: int = 12) -> list[str]:
    """``--server-metrics``: what the Temporal server did per message, by kind of work and, for the
    busiest operations, by operation."""
    lines = ["", f"{'the Temporal server, counted':<58} {'per msg':>7}"]
    for metric, value in sorted(totals(work).items()):
        lines.append(f"  {metric:<56} {value:>7.2f}")
    for key in sorted(work, key=lambda key: -work[key])[:top]:
        lines.append(f"    {key[:54]:<54} {work[key]:>7.2f}")
    return lines


def throughput_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"{'throughput (not a target)':<36} {'n':>6} {'seconds':>8} {'per s':>6} {'steady':>6} "
        f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}"
    ]

    def row(name: str, r: dict[str, Any]) -> None:
        lat = " ".join(f"{r.get(k, math.nan):>7.0f}" for k in ("p50_ms", "p95_ms", "p99_ms"))
        lines.append(
            f"{name:<36} {r['n']:>6} {r['seconds']:>8.1f} {r['rate']:>6.1f} {r.get('steady_rate', 0):>6.1f} "
            f"{lat}"
        )

    phases = (
        ("A", "A service, backlog"),
        ("A_half", "A service, half its rate"),
        ("B", "B PIP-186 consumer, backlog"),
        ("A_faults", f"A with {report.get('fault_rate', 0):.0%} delete faults"),
        ("B_faults", f"B with {report.get('fault_rate', 0):.0%} delete faults"),
    )
    for key, name in phases:
        if report.get(key):
            row(name, report[key])
    return lines


def check_lines(report: dict[str, Any]) -> list[str]:
    """Whether every request ended as it must, phase by phase."""
    lines = []
    for key in ("A", "A_half", "A_faults", "B", "B_faults"):
        r = report.get(key)
        if not r:
            continue
        unacked = f", unacked {r['unacked']}" if "unacked" in r else ""
        missing = f", missing {r['missing']}" if "missing" in r else ""
        lines.append(
            f"{key}: outcomes {dict(sorted(r['outcomes'].items()))}, wrong {r['wrong']}{missing}{unacked}, "
            f"storage problems {len(r['storage_problems'])}, late trims released {r.get('late_released', 0)}"
        )
        if r.get("counted") and (late_tasks := r["totals"].get("workflow_task_timeouts", 0)):
            lines.append(
                f"  ({key}: {late_tasks} workflow tasks timed out: the machine was too busy for the workers "
                "to answer in time, and the counts carry the retries)"
            )
        if r.get("resubscribed"):
            lines.append(
                f"  ({key} resubscribed {r['resubscribed']}x: pulsar-lite stopped dispatching to it)"
            )
    fa, fb = report.get("A_faults"), report.get("B_faults")
    if fa:
        retries = fa["totals"].get("activity_retries", 0) / fa["n"] if fa.get("counted") else math.nan
        lines.append(
            f"faults: A drained in {fa['seconds']:.0f} s ({retries:.2f} activity retries per message)"
        )
    if fb:
        lines.append(
            f"faults: B drained in {fb['seconds']:.0f} s ({fb['reconsumed']} reconsumed, "
            f"after {report.get('reconsume_seconds', math.nan):.0f} s each)"
        )
    return lines


def summary_line(a: dict[str, Any], b: dict[str, Any] | None) -> str:
    """One machine-readable line: the headline counts per message and CPU per message, A against B."""
    per = {key: a["totals"].get(key, 0) / a["n"] for key in ("events", "workflow_tasks", "activity_tasks")}
    rows = cpu_rows(a, b)
    a_cpu, b_cpu = _total([r[1] for r in rows]), _total([r[2] for r in rows]) if b else math.nan
    return (
        f"events_per_message={per['events']:.2f} workflow_tasks_per_message={per['workflow_tasks']:.2f} "
        f"activity_tasks_per_message={per['activity_tasks']:.2f} "
        f"actions_per_message={a['totals'].get('actions', 0) / a['n']:.2f} "
        f"cpu_ms_per_message_A={a_cpu:.1f} cpu_ms_per_message_B={b_cpu:.1f} A/B={a_cpu / b_cpu:.2f}"
    )


def print_table(report: dict[str, Any]) -> str:
    a, b = report["A"], report.get("B")
    lines = [
        f"N={report['n']} messages  run {report['run_id']}  load avg {report['load_before']} -> "
        f"{report['load_after']}  replicas {report['replicas'] or 'one per pool'}  "
        f"in-flight {report.get('inflight')}  {' '.join(report.get('settings', []))}".rstrip(),
        "",
    ]
    if a.get("counted"):
        lines += shape_lines(a, b) + [""]
    lines += cpu_lines(a, b)
    if a.get("server_work"):
        lines += server_work_lines(a["server_work"])
    lines += [""] + throughput_lines(report) + [""] + check_lines(report)
    if a.get("counted"):
        lines += ["", summary_line(a, b)]
    return "\n".join(lines)


# --- the bulk drain (``--bulk``) ---------------------------------------------------------------------------


def drain_lines(report: dict[str, Any]) -> list[str]:
    """Each drain: its rate and CPU, the delete rate against the limit, memory per process and the backlogs
    over time; whether every request was decided."""
    lines = [
        f"bulk drain, every request published at once  load avg {report['load_before']} -> "
        f"{report['load_after']}  in-flight {report.get('inflight')}  "
        f"{' '.join(report.get('settings', []))}".rstrip()
    ]
    drains = report["drains"]
    lines += [
        "",
        f"{'replicas (processes per pool)':<30} {'n':>6} {'ledgers':>7} {'seconds':>8} {'per s':>6} "
        f"{'steady':>6} {'CPU s':>7} {'CPU s/ledger':>12} {'pools CPU s':>11}",
    ]
    for d in drains:
        cpu = sum(d["pools_cpu_s"].values()) + sum(d["servers_cpu_s"].values())
        lines.append(
            f"{d['replicas']:<30} {d['n']:>6} {d['ledgers']:>7} {d['seconds']:>8.0f} {d['rate']:>6.2f} "
            f"{d['steady_rate']:>6.2f} {cpu:>7.0f} {cpu / d['ledgers']:>12.3f} "
            f"{sum(d['pools_cpu_s'].values()):>11.0f}"
        )
    lines += [
        "",
        f"{'deletes per second (dispatch)':<30} {'deletes':>8} {'mean':>6} {'peak 1 s':>8} {'10 s':>6} "
        f"{'60 s':>6} {'limit':>6} {'server':>6}",
    ]
    for d in drains:
        for kind in sorted(d["deletes"]):
            peak = d["peak_rate"].get(kind, {})
            limit = d["limits"].get(kind, 0.0)
            server = d["server_limits"].get(kind, 0.0)  # what the server says it applies to the queue
            lines.append(
                f"  {d['replicas']} replica(s), {kind:<16} {d['deletes'][kind]:>8} "
                f"{d['mean_delete_rate'].get(kind, 0.0):>6.2f} {peak.get('1s', 0.0):>8.2f} "
                f"{peak.get('10s', 0.0):>6.2f} {peak.get('60s', 0.0):>6.2f} {limit or 'none':>6} "
                f"{server or '-':>6}"
            )
    lines += drain_cpu_lines(drains)
    lines += ["", f"{'RSS MB (VmRSS)':<30} {'start':>7} {'middle':>7} {'end':>7}"]
    for d in drains:
        for name, rss in d["rss_mb"].items():
            lines.append(
                f"  {name:<28} {rss.get('start', 0):>7.0f} {rss.get('middle', 0):>7.0f} "
                f"{rss.get('end', 0):>7.0f}"
            )
    for d in drains:
        lines += [
            "",
            f"backlog over time, {d['replicas']} replica(s) "
            f"(all {d['n']} published in {d['publish_seconds']:.0f} s)",
            f"  {'t s':>6} {'closed':>7} {'open wf':>7} {'topic':>7} {'wf queue':>8} {'bk queue':>8} "
            f"{'off queue':>9} {'ack queue':>9} {'CPU s':>7}",
        ]
        for s in backlog_rows(d["samples"]):
            q = s["queue_backlog"]
            lines.append(
                f"  {s['t']:>6.0f} {s['closed']:>7} {s['running']:>7} {s['topic_backlog']:>7} "
                f"{q.get('workflow', -1):>8} {q.get('bookkeeper', -1):>8} {q.get('offload', -1):>9} "
                f"{q.get('pulsar', -1):>9} {s['cpu_s']:>7.0f}"
            )
    lines.append("")
    for d in drains:
        if not d.get("complete", True):
            lines.append(
                f"{d['replicas']} replica(s): STOPPED after {d['seconds']:.0f} s as asked, "
                f"{d['missing']} of {d['ledgers'] + d['missing']} requests not yet decided"
            )
        lines.append(
            f"{d['replicas']} replica(s): outcomes {dict(sorted(d['outcomes'].items()))}, "
            f"wrong {d['wrong']}, missing {d['missing']}, dead-lettered {d['dead_lettered']}, "
            f"unacked {d['unacked']}, "
            f"storage problems {len(d['storage_problems'])}"
        )
    return lines


def drain_cpu_lines(drains: list[dict[str, Any]]) -> list[str]:
    """CPU ms per ledger decided of each pool (its replicas together) and each server, per drain: what to
    scale."""
    per: list[dict[str, float]] = []
    for d in drains:
        row: dict[str, float] = {}
        for name, cpu in d["pools_cpu_s"].items():
            pool = next((p for p in POOLS if f"-{p}-" in f"{name}-"), name)
            row[f"{pool} pool"] = row.get(f"{pool} pool", 0.0) + cpu
        for name, cpu in d["servers_cpu_s"].items():
            row[SERVERS.get(name, name)] = cpu
        per.append({k: v * 1000 / d["ledgers"] for k, v in row.items()})
    header = f"{'CPU ms per ledger, from /proc':<30}" + "".join(
        f" {str(d['replicas']) + ' replica(s)':>13}" for d in drains
    )
    lines = ["", header]
    for key in dict.fromkeys(k for row in per for k in row):
        lines.append(f"  {key:<28}" + "".join(f" {row.get(key, 0.0):>13.1f}" for row in per))
    lines.append(f"  {'total':<28}" + "".join(f" {sum(row.values()):>13.1f}" for row in per))
    return lines


def backlog_rows(samples: list[dict[str, Any]], points: int = 10) -> list[dict[str, Any]]:
    """At most ``points`` samples, evenly spread, the first and the last included."""
    if len(samples) <= points:
        return samples
    step = (len(samples) - 1) / (points - 1)
    return [samples[round(i * step)] for i in range(points)]
