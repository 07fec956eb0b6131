"""The benchmark's report: A/C per round and over the rounds, and the table printed at the end of a run."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.phases import AResult, CResult
from bench.server_metrics import totals


@dataclass(frozen=True)
class Round:
    """One pair of A and C at full rate (``--rounds``); A's checks are kept, so every round proves no loss."""

    a_rate: float
    a_steady_rate: float
    c_rate: float
    c_steady_rate: float
    ratio: float
    a_wrong: int = 0
    a_missing: int = 0
    a_unacked: int = -1
    # Temporal server CPU ms per deletion / per trivial workflow: with the server the bottleneck, the
    # round's A/C is mostly the inverse of their ratio (nan: not measured).
    a_server_ms: float = math.nan
    c_server_ms: float = math.nan
    # CPU ms per deletion / per trivial workflow of everything else measured: the pools (C's workers) and the
    # stack's other services. With the server pinned these share the other core; a cold one shows here.
    a_other_ms: float = math.nan
    c_other_ms: float = math.nan
    # Where end to end loses to steady: first publish to first close, the 95th percentile close to the last.
    a_head_s: float = math.nan
    a_tail_s: float = math.nan
    c_head_s: float = math.nan
    c_tail_s: float = math.nan
    # --server-metrics: the server's counts per deletion and per trivial workflow, summed by metric.
    a_server_work: dict[str, float] = field(default_factory=dict)
    c_server_work: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, a: AResult, c: CResult) -> Round:
        return cls(
            a_rate=a.rate,
            a_steady_rate=a.steady_rate,
            c_rate=c.rate,
            c_steady_rate=c.steady_rate,
            ratio=a.rate / c.rate,
            a_wrong=a.wrong + len(a.storage_problems),
            a_missing=a.missing,
            a_unacked=a.unacked,
            a_server_ms=_server_ms(a.servers_cpu, a.n),
            c_server_ms=_server_ms(c.servers_cpu, c.n),
            a_other_ms=_other_ms(a.servers_cpu, a.procs, a.n),
            c_other_ms=_other_ms(c.servers_cpu, c.procs, c.n),
            a_head_s=a.head_seconds,
            a_tail_s=a.tail_seconds,
            c_head_s=c.head_seconds,
            c_tail_s=c.tail_seconds,
            a_server_work=totals(a.server_work),
            c_server_work=totals(c.server_work),
        )


def _server_ms(servers_cpu: dict[str, float], workflows: int) -> float:
    seconds = servers_cpu.get("temporal")
    return seconds * 1000 / workflows if seconds is not None and workflows else math.nan


def _other_ms(servers_cpu: dict[str, float], procs: dict[str, dict[str, float]], workflows: int) -> float:
    if not servers_cpu or not workflows:
        return math.nan
    services = sum(seconds for name, seconds in servers_cpu.items() if name != "temporal")
    seconds = services + sum(p["cpu_s"] for p in procs.values())
    return seconds * 1000 / workflows


def a_over_c(report: dict[str, Any]) -> float:
    """A/C of the run: the median over ``--rounds`` pairs, or the one pair's ratio."""
    rounds = report.get("rounds") or []
    if rounds:
        return float(statistics.median(r["ratio"] for r in rounds))
    c = report.get("C")
    return report["A"]["rate"] / c["rate"] if c else float("nan")


def server_work_lines(a: dict[str, float], c: dict[str, float], top: int = 12) -> list[str]:
    """``--server-metrics``: what the Temporal server did per A deletion and per C workflow, by kind of work
    and, for the operations where A and C differ most, by operation."""
    lines = ["", f"{'the server, counted':<58} {'A/del':>7} {'C/wf':>7}"]
    a_totals, c_totals = totals(a), totals(c)
    for metric in sorted(set(a_totals) | set(c_totals)):
        lines.append(f"  {metric:<56} {a_totals.get(metric, 0):>7.2f} {c_totals.get(metric, 0):>7.2f}")
    differing = sorted(set(a) | set(c), key=lambda key: -abs(a.get(key, 0) - c.get(key, 0)))[:top]
    for key in differing:
        lines.append(f"    {key[:54]:<54} {a.get(key, 0):>7.2f} {c.get(key, 0):>7.2f}")
    return lines


def _placement(report: dict[str, Any]) -> str:
    """Where the server ran; reports written before ``placement`` existed say only whether it was pinned."""
    return str(report.get("placement", "server pinned to CPU 0" if report.get("pin_server") else ""))


def print_table(report: dict[str, Any]) -> str:
    a, b, c = report["A"], report.get("B"), report.get("C")
    half = report.get("A_half")
    lines = [
        f"N={report['n']}  run {report['run_id']}  load avg {report['load_before']} -> {report['load_after']}"
        f"  replicas {report['replicas'] or 'one per pool'}  in-flight {report.get('inflight')}"
        f"{'  ' + _placement(report) if _placement(report) else ''}"
        f"  {' '.join(report.get('settings', []))}",
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
    if c:
        row(f"C trivial wf, {c['activities']:.2f} activities", {**c, "p50_ms": float("nan")})
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
        versus = f", C {c['transitions']:.1f}" if c and c.get("transitions") else ""
        lines.append(
            f"state transitions per workflow (sampled histories): A {a['transitions']:.1f} "
            f"(DELETED {a['transitions_happy']:.1f}){versus}"
        )
    lines.append("")
    lines.append("process                     cpu s   peak RSS MB")
    for name, stats in a["procs"].items():
        lines.append(f"  A {name:<24} {stats['cpu_s']:>6.1f} {stats['rss_mb']:>10.0f}")
    if b:
        lines.append(f"  B pip186 consumer          {b['cpu_s']:>6.1f} {b['rss_mb']:>10.0f}")
    if c:
        for name, stats in c["procs"].items():
            lines.append(f"  C {name:<24} {stats['cpu_s']:>6.1f} {stats['rss_mb']:>10.0f}")
    lines.append(f"  servers during A: {a['servers_cpu']}")
    if c:
        lines.append(f"  servers during C: {c['servers_cpu']}")
    if a.get("server_work") and c and c.get("server_work"):
        lines += server_work_lines(a["server_work"], c["server_work"])
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
    rounds = report.get("rounds") or []
    if len(rounds) > 1:
        lines.append("")
        lines.append(
            f"{'round':<6} {'A/s':>6} {'steady':>6} {'C/s':>6} {'steady':>6} {'A/C':>5}"
            f"  {'server ms A/C':>13}  A wrong/missing/unacked"
        )
        for index, r in enumerate(rounds, 1):
            server = f"{r.get('a_server_ms', math.nan):.1f}/{r.get('c_server_ms', math.nan):.1f}"
            lines.append(
                f"{index:<6} {r['a_rate']:>6.1f} {r['a_steady_rate']:>6.1f} {r['c_rate']:>6.1f} "
                f"{r['c_steady_rate']:>6.1f} {r['ratio']:>5.2f}  {server:>13}"
                f"  {r['a_wrong']}/{r['a_missing']}/{r['a_unacked']}"
            )
        lines.append(f"A/C below is the median of {len(rounds)} rounds")
    ab = a["rate"] / b["rate"] if b else float("nan")
    ac = a_over_c(report)
    p99 = (half or a)["p99_ms"]
    lines.append("")
    lines.append(f"A/B={ab:.2f} A/C={ac:.2f} events_per_deletion={a['events_happy']:.1f} p99_ms={p99:.0f}")
    return "\n".join(lines)
