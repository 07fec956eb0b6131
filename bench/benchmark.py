"""What a deletion costs: the deletion service (A) against a PIP-186 consumer without Temporal (B).

    python bench/benchmark.py --n 500 --quick      # a few minutes
    python bench/benchmark.py --n 1000             # the full run, B's fault phase at PIP-186's 600 s delay

The headline is counts, which do not scatter: per ledger and per shape of deletion (``bench/mix.py``), what
A's workflow runs cost in Temporal, read from their histories after the run (``bench/histories.py``: events,
workflow tasks, activity tasks, markers, timers, signals, Temporal Cloud actions, state transitions, history
bytes), and how often B's messages were delivered. Then CPU per message of every process (each pool, the
Temporal server, every stand-in of the Pulsar cluster; B and the same stand-ins), read from /proc, each also
as a share of B's whole. Throughput and latency are printed too, but depend on the machine and its load.

One run on an embedded stack of its own (ports 23xxx and a state dir of its own, so that tests sharing the
default stack neither disturb it nor are disturbed), on empty databases:

* **A** — seeds N requests of the mix, starts each pool as its own ``ledger-deletion worker --pool X``
  process, publishes the N requests at once and waits until every workflow closed (a workflow closes only
  after it acked its messages); then reads every run's history. The mix's late requests arrive before the
  broker's metadata update: the benchmark makes that update once the workflow waits out its in-use grace.
* **A, half rate** — another set published at half A's rate: p50/p95/p99 publish → close (= ack) latency,
  the requests that wait out a grace timer by design left out.
* **B** — ``bench/pip186_consumer.py`` in its own process on the same mix.
* **faults** — A and B again with ``--fault-rate`` (20 %) transient failures injected in the delete steps
  (``bench/faults.py``; the pools run through ``bench/worker.py``): time to drain. A retries the failed step
  (1, 2, 4 … s); B reconsumes the whole message after ``--reconsume-seconds`` (PIP-186's default 600 s, so
  this phase alone takes ~40 minutes).

``--bulk N`` runs the bulk drain instead (``bench/drain.py``): N requests of the mix published at once, as
``reconcile --submit`` does after a first scan, drained by pools of each ``--bulk-replicas`` count of
processes (``1,2``; ``1:20000,2:5000`` gives a count of requests per replica count), sampled over time.

``--quick`` leaves out the half-rate phase and reconsumes B's failed messages after 1 s. The results (the
table, every raw number, the processes' logs) are written outside the repository, to ``--out`` or
``$XDG_STATE_HOME/ledger-deletion/bench/<utc time>/``; the benchmark prints where. Its stack stops at the end
(``--keep-stack`` leaves it running, its workflows in the Temporal UI on port 23234).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client  # noqa: E402

from bench.drain import run_drain  # noqa: E402
from bench.mix import Seeded, seed  # noqa: E402
from bench.phases import Run, run_a, run_b  # noqa: E402
from bench.processes import StackProcs, bench_ports, load_average  # noqa: E402
from bench.report import drain_lines, print_table  # noqa: E402
from devstack import ports  # noqa: E402
from devstack.cluster import SimulatedCluster  # noqa: E402
from devstack.stack import Stack, StackEndpoints  # noqa: E402
from ledger_deletion.settings import Settings  # noqa: E402


def parse_replicas(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        pool, count = part.split("=")
        out[pool] = int(count)
    return out


def parse_bulk_replicas(text: str, default: int) -> list[tuple[int, int]]:
    """``1,2`` or ``1:20000,2:5000``: (processes per pool, requests) of each drain."""
    out = []
    for part in filter(None, text.split(",")):
        replicas, _, count = part.partition(":")
        out.append((int(replicas), int(count) if count else default))
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack(args.state_dir, bench_ports(args.port_base, args.server_metrics))
    if not args.keep_state:
        # Every run on an empty Temporal database: a database grown by earlier runs makes each write dearer.
        stack.down()
        shutil.rmtree(args.state_dir / "data", ignore_errors=True)
    endpoints = stack.up()
    try:
        return await _measure(args, stack, endpoints)
    finally:
        if not args.keep_stack:
            stack.down()  # everything is read from it: its servers would only hold CPU and memory


async def _measure(args: argparse.Namespace, stack: Stack, endpoints: StackEndpoints) -> dict[str, Any]:
    base_env = {**os.environ, **endpoints.as_env()}
    os.environ.update({k: v for k, v in endpoints.as_env().items() if k.startswith("AWS_")})
    run_id = uuid.uuid4().hex[:6]
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    zk = endpoints.zookeeper_client()
    cluster = SimulatedCluster(zk, endpoints.s3_client(), bucket=endpoints.offload_bucket)
    client = await Client.connect(endpoints.temporal_address)
    extra = dict(item.split("=", 1) for item in args.set)
    run = Run(endpoints, run_id, logs, cluster, client, base_env, args.inflight, extra, args.storage_sample)
    stack_procs = StackProcs.of(stack)
    report: dict[str, Any] = {
        "n": args.n,
        "run_id": run_id,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "temporal_address": endpoints.temporal_address,
        "load_before": load_average(),
        "replicas": args.replicas,
        "inflight": args.inflight,
        "settings": args.set,
        "fault_rate": args.fault_rate,
        "reconsume_seconds": args.reconsume_seconds,
        "task_queues": {},
    }
    n = args.n

    def seeded(phase: str, count: int) -> Seeded:
        began = time.monotonic()
        out = seed(cluster, f"bench-{run_id}/{phase}", count)
        report["task_queues"][phase] = run.settings(phase).task_queue("workflow")
        print(f"seeded {phase}: {count} requests in {time.monotonic() - began:.1f} s", flush=True)
        return out

    if args.bulk:
        report["drains"] = []
        for replicas_count, count in parse_bulk_replicas(args.bulk_replicas, args.bulk):
            phase = f"d{replicas_count}"
            drained = await run_drain(
                run,
                phase,
                seeded(phase, count),
                replicas=replicas_count,
                stack_procs=stack_procs,
                sample_seconds=args.sample_seconds,
                stop_after=args.bulk_stop_after,
            )
            report["drains"].append(asdict(drained))
            print(
                f"drain, {replicas_count} replica(s): {drained.ledgers} decided in {drained.seconds:.0f} s, "
                f"{drained.rate:.2f}/s, {drained.cpu_s / drained.ledgers:.3f} CPU s each",
                flush=True,
            )
        report["load_after"] = load_average()
        zk.stop()
        zk.close()
        return report

    replicas = parse_replicas(args.replicas)
    a = await run_a(
        run, "a", seeded("a", n), replicas=replicas, stack_procs=stack_procs, count_histories=True
    )
    report["A"] = asdict(a)
    print(f"A: {a.rate:.1f} messages/s over {a.seconds:.1f} s", flush=True)

    if not args.skip_half:
        rate = a.rate / 2
        half_n = min(n, max(200, int(rate * args.half_seconds)))
        half = await run_a(run, "h", seeded("h", half_n), rate=rate, replicas=replicas)
        report["A_half"] = {**asdict(half), "publish_rate": rate}
        print(f"A at {rate:.1f}/s: p99 {half.p99_ms:.0f} ms", flush=True)

    if not args.skip_b:
        b = run_b(run, "b", seeded("b", n), reconsume_seconds=args.reconsume_seconds, stack_procs=stack_procs)
        report["B"] = asdict(b)
        print(f"B: {b.rate:.1f} messages/s", flush=True)

    if args.fault_rate > 0 and not args.skip_faults:
        fa = await run_a(
            run, "fa", seeded("fa", n), replicas=replicas, fault_rate=args.fault_rate, count_histories=True
        )
        report["A_faults"] = asdict(fa)
        print(f"A with faults: drained in {fa.seconds:.1f} s", flush=True)
        if not args.skip_b:
            print(
                f"B with faults: a failed message comes back after {args.reconsume_seconds:.0f} s "
                "(reconsumeLater); draining takes several such rounds",
                flush=True,
            )
            fb = run_b(
                run,
                "fb",
                seeded("fb", n),
                fault_rate=args.fault_rate,
                reconsume_seconds=args.reconsume_seconds,
            )
            report["B_faults"] = asdict(fb)
            print(f"B with faults: drained in {fb.seconds:.1f} s", flush=True)

    report["load_after"] = load_average()
    zk.stop()
    zk.close()
    return report


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def default_out() -> Path:
    """``$XDG_STATE_HOME/ledger-deletion/bench/<utc time>``: outside the repository, as the stack's state."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "ledger-deletion" / "bench" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="requests (messages) per phase")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="no half-rate phase, B's failed messages reconsumed after 1 s (a CI-size run with --n 200)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the results go (default: $XDG_STATE_HOME/ledger-deletion/bench/<utc time>)",
    )
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/ld-bench-stack"))
    parser.add_argument(
        "--port-base",
        type=int,
        default=ports.BENCH,
        help="ports of the benchmark's own stack (devstack.ports: base + 233 Temporal …); another base and "
        "--state-dir run a "
        "second benchmark beside the first",
    )
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument(
        "--reconsume-seconds",
        type=float,
        default=None,
        help="B's reconsumeLater delay (default PIP-186's 600 s, the fault phase then takes ~40 min; "
        "1 with --quick)",
    )
    parser.add_argument(
        "--bulk",
        type=int,
        default=0,
        help="run the bulk drain instead: this many requests published at once (bench/drain.py)",
    )
    parser.add_argument(
        "--bulk-replicas",
        default="1,2",
        help="the drains' processes per pool, each optionally with its own request count: 1:20000,2:5000",
    )
    parser.add_argument(
        "--bulk-stop-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop each drain after this long and report what was decided so far (a deadline, not a result)",
    )
    parser.add_argument(
        "--sample-seconds", type=float, default=10.0, help="the drain's sampling period (backlogs, memory)"
    )
    parser.add_argument("--replicas", default="", help="processes per pool, e.g. workflow=2,bookkeeper=2")
    parser.add_argument(
        "--inflight",
        type=int,
        default=None,
        help="the ingest's max in-flight messages (default 100; with --bulk the product's own default)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="VAR=VALUE", help="extra environment for the pools"
    )
    parser.add_argument("--half-seconds", type=float, default=60.0, help="length of the half-rate run")
    parser.add_argument(
        "--storage-sample",
        type=int,
        default=2000,
        help="ledgers and objects checked in ZooKeeper/S3 after each phase (0: every one)",
    )
    parser.add_argument(
        "--server-metrics",
        action="store_true",
        help="turn on the Temporal server's Prometheus endpoint and print what it did per message "
        "(persistence requests, queue tasks, service requests); off by default, as it costs the server CPU",
    )
    parser.add_argument(
        "--keep-state", action="store_true", help="reuse the stack's databases instead of starting empty"
    )
    parser.add_argument(
        "--keep-stack",
        action="store_true",
        help="leave the benchmark's stack running, to look at its workflows",
    )
    parser.add_argument(
        "--table-from",
        type=Path,
        default=None,
        metavar="REPORT_JSON",
        help="run nothing: print the table of an earlier run's report.json again (after the table changed)",
    )
    parser.add_argument("--skip-b", action="store_true")
    parser.add_argument("--skip-half", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.skip_half = True
    if args.inflight is None:
        # A bulk drain asks how the service as shipped copes; the cost phases keep their fixed 100.
        default = Settings.model_fields["ingest_max_inflight"].default
        args.inflight = default if args.bulk else 100
    if args.reconsume_seconds is None:
        args.reconsume_seconds = 1.0 if args.quick else 600.0
    return args


def table_of(report: dict[str, Any]) -> str:
    return "\n".join(drain_lines(report)) if "drains" in report else print_table(report)


def main() -> None:
    args = parse_args()
    if args.table_from:
        print(table_of(json.loads(args.table_from.read_text())))
        return
    args.out = (args.out or default_out()).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"results in {args.out}", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # so ``finally`` blocks stop the pool processes we started
    report = asyncio.run(main_async(args))
    table = table_of(report)
    (args.out / "report.json").write_text(json.dumps({**report, "table": table}, indent=1))
    (args.out / "table.txt").write_text(table + "\n")
    print()
    print(table)
    print(f"\nresults in {args.out}")


if __name__ == "__main__":
    main()
