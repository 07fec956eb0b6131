"""The table printed at the end of a benchmark run."""

from __future__ import annotations

from typing import Any

from bench.server_metrics import totals


def server_work_lines(work: dict[str, float], top: int = 12) -> list[str]:
    """``--server-metrics``: what the Temporal server did per deletion, by kind of work and, for the
    busiest operations, by operation."""
    lines = ["", f"{'the server, counted':<58} {'per del':>7}"]
    for metric, value in sorted(totals(work).items()):
        lines.append(f"  {metric:<56} {value:>7.2f}")
    for key in sorted(work, key=lambda key: -work[key])[:top]:
        lines.append(f"    {key[:54]:<54} {work[key]:>7.2f}")
    return lines


def print_table(report: dict[str, Any]) -> str:
    a, b = report["A"], report.get("B")
    half = report.get("A_half")
    lines = [
        f"N={report['n']}  run {report['run_id']}  load avg {report['load_before']} -> {report['load_after']}"
        f"  replicas {report['replicas'] or 'one per pool'}  in-flight {report.get('inflight')}"
        f"  {' '.join(report.get('settings', []))}".rstrip(),
        "",
        f"{'run':<36} {'n':>6} {'seconds':>8} {'per s':>6} {'steady':>6} "
        f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'ev/del':>6}",
    ]

    def row(name: str, r: dict[str, Any], events: str = "") -> None:
        lat = " ".join(f"{r.get(k, float('nan')):>7.0f}" for k in ("p50_ms", "p95_ms", "p99_ms"))
        lines.append(
            f"{name:<36} {r['n']:>6} {r['seconds']:>8.1f} {r['rate']:>6.1f} {r.get('steady_rate', 0):>6.1f} "
            f"{lat} {events:>6}"
        )

    row("A service, backlog (max rate)", a, f"{a['events_happy']:.1f}")
    if half:
        row(f"A service @ {half['publish_rate']:.1f}/s (half max)", half, f"{half['events_happy']:.1f}")
    if b:
        row("B PIP-186 consumer, backlog", b)
        if b.get("resubscribed"):
            lines.append(f"  (B resubscribed {b['resubscribed']}x: pulsar-lite stopped dispatching to it)")
    fa, fb = report.get("A_faults"), report.get("B_faults")
    if fa:
        row(f"A with {report['fault_rate']:.0%} delete faults", fa, f"{fa['events_happy']:.1f}")
    if fb:
        row(f"B with faults, {fb['reconsumed']} reconsumed", fb)
    if fa and fb:
        lines.append(
            f"faults: A drained in {fa['seconds']:.0f} s, B in {fb['seconds']:.0f} s "
            f"(B reconsumes after {report.get('reconsume_seconds', float('nan')):.0f} s)"
        )
    if a.get("transitions"):
        lines.append(
            f"state transitions per workflow (sampled histories): {a['transitions']:.1f} "
            f"(DELETED {a['transitions_happy']:.1f})"
        )
    lines.append("")
    lines.append("process                     cpu s   peak RSS MB")
    for name, stats in a["procs"].items():
        lines.append(f"  A {name:<24} {stats['cpu_s']:>6.1f} {stats['rss_mb']:>10.0f}")
    if b:
        lines.append(f"  B pip186 consumer          {b['cpu_s']:>6.1f} {b['rss_mb']:>10.0f}")
    lines.append(f"  servers during A: {a['servers_cpu']}")
    if a.get("server_work"):
        lines += server_work_lines(a["server_work"])
    lines.append(
        f"A outcomes {a['outcomes']}, wrong {a['wrong']}, missing {a.get('missing', 0)}, "
        f"unacked {a.get('unacked', -1)}, storage problems {len(a['storage_problems'])}"
    )
    if b:
        lines.append(f"B outcomes {b['outcomes']}, storage problems {len(b['storage_problems'])}")
    if fa:
        lines.append(f"A faults outcomes {fa['outcomes']}, storage problems {len(fa['storage_problems'])}")
    if fb:
        lines.append(f"B faults outcomes {fb['outcomes']}, storage problems {len(fb['storage_problems'])}")
    ab = a["rate"] / b["rate"] if b else float("nan")
    p99 = (half or a)["p99_ms"]
    lines.append("")
    lines.append(f"A/B={ab:.2f} events_per_deletion={a['events_happy']:.1f} p99_ms={p99:.0f}")
    return "\n".join(lines)
