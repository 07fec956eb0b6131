"""Throughput benchmark: the deletion service (A), the PIP-186 consumer (B), the orchestration limit (C).

    python bench/benchmark.py --n 1000

One run on the embedded stack (its own ports and state dir, so tests sharing the default stack are not
disturbed, and their load does not land on our Temporal server):

* **A, max rate** — seeds N requests of a realistic mix (``bench/mix.py``), starts each pool as its own
  ``ledger-deletion worker --pool X`` process, publishes the N requests and waits until every workflow closed
  (a workflow closes only after it acked its messages). Deletions/s from first publish to last close; history
  events per deletion from the workflows' history lengths; CPU seconds and peak RSS (VmHWM) per process from
  /proc, the stack's servers included.
* **A, half rate** — another set published at half the measured maximum rate: p50/p95/p99 publish → close
  (= ack) latency, in-use requests (which wait out their grace timer by design) left out.
* **B** — ``bench/pip186_consumer.py`` in its own process on the same mix.
* **C** — ``TrivialWorkflow`` of no-op activities, started N times (32 concurrent starts, as the ingest loop
  does) on the same server, restarted on an empty database first as A started on one; workflow i has the
  shape of one of A's sampled workflows (same number of activities, same number in the first, parallel
  round), so both ask the server for the same work.
* **faults** — A and B again with ``--fault-rate`` (20 %) transient failures injected in the delete steps
  (``bench/faults.py``, pools started through ``bench/worker.py``): time to drain. A retries the failed step
  (1, 2, 4 … s); B reconsumes the whole message after ``--reconsume-seconds`` (PIP-186's default 600 s, so
  this phase alone takes ~40 minutes; ``--reconsume-seconds 1`` for a quick run).

The last line is ``A/B=<ratio> A/C=<ratio> events_per_deletion=<n> p99_ms=<n>``. Results also go to
``bench/results/<utc time>.json``. This is not a test: numbers depend on the machine and on what else runs.
``--pin-server`` puts the Temporal server on a core of its own (the server-bound A/C, though A's pools and
stand-ins then share the other core); ``--server-cpu 0.6`` caps it at 0.6 of a core with a cgroup quota
instead, so that it is the only bottleneck and everything else has CPU to spare; ``--rounds K``
measures A and C K times, alternating, and takes A/C as the median of the K ratios;
``--profile-server DIR`` records it with perf during A and C, for ``bench/server_profile.py``.
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

from bench.mix import Seeded, seed  # noqa: E402
from bench.phases import Run, Shape, empty_temporal_database, run_a, run_b, run_c  # noqa: E402
from bench.processes import (  # noqa: E402
    ROOT,
    CpuCap,
    ServerPlacement,
    StackProcs,
    bench_ports,
    load_average,
)
from bench.report import Round, print_table  # noqa: E402
from devstack.cluster import SimulatedCluster  # noqa: E402
from devstack.stack import Stack, StackEndpoints  # noqa: E402


def parse_replicas(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        pool, count = part.split("=")
        out[pool] = int(count)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack(args.state_dir, bench_ports(args.port_base, args.server_metrics))
    if not args.keep_state:
        # Every run on an empty Temporal database: a database grown by earlier runs (800 MB after a dozen)
        # makes each write dearer and the numbers drift from run to run.
        stack.down()
        shutil.rmtree(args.state_dir / "data", ignore_errors=True)
    placement = ServerPlacement(args.pin_server, CpuCap(args.server_cpu) if args.server_cpu else None)
    if args.pin_server:
        # Everything this run starts (stack services, pools, C's workers) inherits CPU 1 ...
        os.sched_setaffinity(0, {1})
    endpoints = stack.up()
    placement.apply(stack)
    try:
        return await _measure(args, stack, endpoints, placement)
    finally:
        placement.release(stack)


async def _measure(
    args: argparse.Namespace, stack: Stack, endpoints: StackEndpoints, placement: ServerPlacement
) -> dict[str, Any]:
    base_env = {**os.environ, **endpoints.as_env()}
    os.environ.update({k: v for k, v in endpoints.as_env().items() if k.startswith("AWS_")})
    run_id = uuid.uuid4().hex[:6]
    logs = args.state_dir / "bench-logs" / run_id
    logs.mkdir(parents=True, exist_ok=True)
    zk = endpoints.zookeeper_client()
    cluster = SimulatedCluster(zk, endpoints.s3_client(), bucket=endpoints.offload_bucket)
    client = await Client.connect(endpoints.temporal_address)
    extra = dict(item.split("=", 1) for item in args.set)
    run = Run(
        endpoints,
        run_id,
        logs,
        cluster,
        client,
        base_env,
        args.inflight,
        args.c_pollers,
        extra,
        args.storage_sample,
    )
    if args.profile_server:
        args.profile_server.mkdir(parents=True, exist_ok=True)
    stack_procs = StackProcs.of(stack, args.profile_server)
    report: dict[str, Any] = {
        "n": args.n,
        "run_id": run_id,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": load_average(),
        "replicas": args.replicas,
        "inflight": args.inflight,
        "c_pollers": {role: run.pollers(role) for role in ("workflow", "activity")},
        "settings": args.set,
        "fault_rate": args.fault_rate,
        "reconsume_seconds": args.reconsume_seconds,
        "pin_server": args.pin_server,
        "server_cpu": args.server_cpu,
        "placement": placement.describe(),
    }
    n = args.n

    def seeded(phase: str, count: int) -> Seeded:
        began = time.monotonic()
        out = seed(cluster, f"bench-{run_id}/{phase}", count)
        print(
            f"seeded {phase}: {count} requests {dict(out.kinds())} in {time.monotonic() - began:.1f} s",
            flush=True,
        )
        return out

    replicas = parse_replicas(args.replicas)
    a = await run_a(
        run, "a", seeded("a", n), replicas=replicas, stack_procs=stack_procs, sample_histories=args.histories
    )
    report["A"] = asdict(a)
    print(f"A: {a.rate:.1f} deletions/s over {a.seconds:.1f} s", flush=True)

    if not args.skip_half:
        rate = a.rate / 2
        half_n = min(n, max(200, int(rate * args.half_seconds)))
        half = await run_a(run, "h", seeded("h", half_n), rate=rate, replicas=replicas)
        report["A_half"] = {**asdict(half), "publish_rate": rate}
        print(f"A at {rate:.1f}/s: p99 {half.p99_ms:.0f} ms", flush=True)

    if not args.skip_b:
        b = run_b(run, "b", seeded("b", n), reconsume_seconds=args.reconsume_seconds)
        report["B"] = asdict(b)
        print(f"B: {b.rate:.1f} deletions/s", flush=True)

    if not args.skip_c:
        # Equal activity count: C replays the shape (activities, first-round width) of A's sampled workflows.
        shapes = a.shapes or [Shape(5, 2)]
        if not args.keep_state:
            await empty_temporal_database(stack, run, placement)
            stack_procs = StackProcs.of(stack, args.profile_server)
        c = await run_c(run, n, shapes, stack_procs)
        report["C"] = asdict(c)
        print(f"C: {c.rate:.1f} workflows/s ({c.activities:.2f} activities per workflow)", flush=True)
        report["rounds"] = [asdict(Round.of(a, c))]
        # One pair of runs says little about A/C (the same code printed 0.83 to 0.91 in a row): more pairs,
        # A and C alternating, each on an empty database, and the ratio taken as their median.
        for index in range(2, args.rounds + 1):
            phase = f"a{index}"
            await empty_temporal_database(stack, run, placement)
            more_a = await run_a(
                run, phase, seeded(phase, n), replicas=replicas, stack_procs=StackProcs.of(stack)
            )
            await empty_temporal_database(stack, run, placement)
            more_c = await run_c(run, n, shapes, StackProcs.of(stack))
            pair = Round.of(more_a, more_c)
            report["rounds"].append(asdict(pair))
            print(
                f"round {index}: A {pair.a_rate:.1f}/s, C {pair.c_rate:.1f}/s, A/C {pair.ratio:.2f}",
                flush=True,
            )

    if args.fault_rate > 0 and not args.skip_faults:
        fa = await run_a(run, "fa", seeded("fa", n), replicas=replicas, fault_rate=args.fault_rate)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per run")
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/ld-bench-stack"))
    parser.add_argument(
        "--port-base",
        type=int,
        default=23000,
        help="ports of the benchmark's own stack (23233 Temporal …); another base and --state-dir run a "
        "second benchmark beside the first",
    )
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument(
        "--reconsume-seconds",
        type=float,
        default=600.0,
        help="B's reconsumeLater delay (PIP-186's default, 600 s; the fault phase then takes ~40 min)",
    )
    parser.add_argument("--replicas", default="", help="processes per pool, e.g. workflow=2,bookkeeper=2")
    parser.add_argument(
        "--inflight", type=int, default=100, help="ingest max in-flight (A) and running workflows (C)"
    )
    parser.add_argument(
        "--c-pollers",
        default="",
        help="C's pollers: N or autoscale (default: the pools' LEDGER_DELETION_*_TASK_POLLERS)",
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
    parser.add_argument("--histories", type=int, default=200, help="histories to read for the event mix")
    parser.add_argument(
        "--profile-server",
        type=Path,
        metavar="DIR",
        help="perf-record the Temporal server during A's backlog (DIR/a.data) and C (DIR/c.data); "
        "read them with bench/server_profile.py",
    )
    placement = parser.add_mutually_exclusive_group()
    placement.add_argument(
        "--pin-server",
        action="store_true",
        help="Temporal server alone on CPU 0, everything else on CPU 1 (server-bound A/C)",
    )
    placement.add_argument(
        "--server-cpu",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="cap the Temporal server at FRACTION of one core (a cgroup CPU quota; root), nothing pinned: "
        "the server the only bottleneck, the pools and stand-ins with CPU to spare, as in a deployment "
        "(0.6 fits two cores)",
    )
    parser.add_argument(
        "--server-metrics",
        action="store_true",
        help="turn on the Temporal server's Prometheus endpoint and print what it did per deletion and per "
        "trivial workflow (persistence requests, queue tasks, service requests); off by default, as it "
        "costs the server CPU",
    )
    parser.add_argument(
        "--keep-state", action="store_true", help="reuse the stack's databases instead of starting empty"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measure A and C this many times, alternating, each on an empty database; A/C is then the "
        "median ratio (one pair of the same code printed 0.77 to 0.93 on the 2026-11-24 VM); 1 for one pair",
    )
    parser.add_argument("--skip-b", action="store_true")
    parser.add_argument("--skip-c", action="store_true")
    parser.add_argument("--skip-half", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not 0 <= args.server_cpu <= (os.cpu_count() or 1):
        parser.error("--server-cpu must be between 0 (no cap) and the number of CPUs")
    if args.skip_c or args.keep_state:
        args.rounds = 1  # no C to pair A with, or no empty database to give each round
    signal.signal(signal.SIGTERM, _interrupt)  # so ``finally`` blocks stop the pool processes we started
    report = asyncio.run(main_async(args))
    table = print_table(report)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (results / f"{stamp}-n{args.n}.json").write_text(json.dumps({**report, "table": table}, indent=1))
    print()
    print(table)


if __name__ == "__main__":
    main()
