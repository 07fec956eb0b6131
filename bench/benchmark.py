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
``--pin-server`` puts the Temporal server on a core of its own (the server-bound A/C); ``--rounds K``
measures A and C K times, alternating, and takes A/C as the median of the K ratios;
``--profile-server DIR`` records it with perf during A and C, for ``bench/server_profile.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import TypeAdapter  # noqa: E402
from temporalio.client import Client, WorkflowExecutionStatus  # noqa: E402
from temporalio.service import RPCError  # noqa: E402

from bench import server_profile  # noqa: E402
from bench.faults import FAULT_RATE_ENV  # noqa: E402
from bench.mix import Seeded, seed  # noqa: E402
from bench.trivial import TRIVIAL_WORKFLOW  # noqa: E402
from bench.worker import CONSUMER_OFFSET_ENV  # noqa: E402
from devstack.cluster import SimulatedCluster  # noqa: E402
from devstack.faults import ServiceControl, count_redeliverable  # noqa: E402
from devstack.stack import SERVICES, Stack, StackEndpoints, StackPorts  # noqa: E402
from ledger_deletion import search_attributes as sa  # noqa: E402
from ledger_deletion.contracts import Outcome  # noqa: E402
from ledger_deletion.settings import Settings  # noqa: E402
from ledger_deletion.submit import RequestPublisher  # noqa: E402


def bench_ports(base: int = 23000) -> StackPorts:
    """The benchmark stack's ports: ``base`` + the default ports' last three digits (23233, 23650 …)."""
    return StackPorts(
        temporal=base + 233,
        temporal_ui=base + 234,
        pulsar=base + 650,
        zookeeper=base + 181,
        s3=base + 900,
        admin=base + 80,
        admin_owner=base + 81,
    )


VENV_BIN = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
POOL_NAMES = ("workflow", "pulsar", "bookkeeper", "offload")


# --- processes and /proc ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    cpu_start: float = 0.0
    cpu_s: float = 0.0
    rss_mb: float = 0.0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def mark(self) -> None:
        self.cpu_start = cpu_seconds(self.pid)

    def sample(self) -> None:
        self.cpu_s = cpu_seconds(self.pid) - self.cpu_start
        self.rss_mb = max(self.rss_mb, peak_rss_mb(self.pid))

    def stop(self, timeout: float = 30) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def spawn(name: str, argv: list[str], env: dict[str, str], logs: Path) -> Proc:
    log = logs / f"{name}.log"
    out = open(log, "wb")  # noqa: SIM115 - the child writes to it for its whole life
    popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    out.close()
    return Proc(name, popen, log)


def wait_for_line(proc: Proc, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in proc.log.read_text(errors="replace"):
            return
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}); see {proc.log}")
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name} not ready in {timeout} s; see {proc.log}")


@dataclass
class StackProcs:
    """The stack's server processes (for CPU per phase; with a profile dir, perf samples of Temporal too)."""

    pids: dict[str, int]
    start: dict[str, float] = field(default_factory=dict)
    profile_dir: Path | None = None  # --profile-server: one perf recording of the Temporal server per phase
    recording: subprocess.Popen[bytes] | None = None

    @classmethod
    def of(cls, stack: Stack, profile_dir: Path | None = None) -> StackProcs:
        pids = {}
        for service in SERVICES:
            with contextlib.suppress(OSError, ValueError):
                pids[service] = int((stack.state_dir / "run" / f"{service}.pid").read_text())
        return cls(pids, profile_dir=profile_dir)

    def mark(self, phase: str) -> None:
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        if self.profile_dir is not None and "temporal" in self.pids:
            self.recording = server_profile.record(self.pids["temporal"], self.profile_dir / f"{phase}.data")

    def cpu(self) -> dict[str, float]:
        if self.recording is not None:
            server_profile.stop(self.recording)
            self.recording = None
        return {name: round(cpu_seconds(pid) - self.start.get(name, 0), 1) for name, pid in self.pids.items()}


# --- the run's configuration -----------------------------------------------------------------------------


@dataclass
class Run:
    endpoints: StackEndpoints
    run_id: str
    logs: Path
    cluster: SimulatedCluster
    client: Client
    base_env: dict[str, str]
    inflight: int = 100  # received-not-acked messages per pulsar process; running workflows in C
    c_pollers: str = ""  # C's pollers; empty: the same as the pools'
    extra_env: dict[str, str] = field(default_factory=dict)  # more LEDGER_DELETION_* settings for the pools
    storage_sample: int = 2000  # ledgers/objects checked in ZooKeeper and S3 after a phase; 0 = all

    def settings_env(self, phase: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            **self.base_env,
            "LEDGER_DELETION_TOPIC": self.topic(phase),
            "LEDGER_DELETION_TASK_QUEUE_PREFIX": self.prefix(phase),
            "LEDGER_DELETION_METRICS_PORT": "0",
            "LEDGER_DELETION_TEMPORAL_METRICS_PORT": "0",
            # The in-use grace is 3 × 60 s in production; one short re-check keeps in-use requests in the mix
            # without making the run wait minutes for them.
            "LEDGER_DELETION_IN_USE_RECHECKS": "1",
            "LEDGER_DELETION_IN_USE_RECHECK_SECONDS": "1",
            "LEDGER_DELETION_SHUTDOWN_GRACE_SECONDS": "2",
            "LEDGER_DELETION_INGEST_MAX_INFLIGHT": str(self.inflight),
            **self.extra_env,
        }
        return {**env, **(extra or {})}

    def topic(self, phase: str) -> str:
        return f"persistent://pulsar/system/__ledger_deletion_bench_{self.run_id}_{phase}"

    def prefix(self, phase: str) -> str:
        return f"ldb-{self.run_id}-{phase}"

    def _flag(self, variable: str) -> bool:
        # Parsed as the pools' settings parse it ("1", "yes", "on" count as true too).
        return TypeAdapter(bool).validate_python(self.extra_env.get(variable, "false"))

    @property
    def colocated(self) -> bool:
        return self._flag("LEDGER_DELETION_COLOCATE_POOLS")

    @property
    def sandboxed(self) -> bool:
        """The pools run workflows in the SDK's sandbox; C's workflow worker then does too."""
        return self._flag("LEDGER_DELETION_WORKFLOW_SANDBOX")

    def pollers(self, role: str) -> str:
        """C's pollers for ``role``: ``--c-pollers`` if given, else what the pools use (the workflow
        pool's for C's workflow worker, an activity pool's for its activity worker)."""
        if self.c_pollers:
            return self.c_pollers
        name = "activity_task_pollers" if role == "activity" else "workflow_task_pollers"
        default = Settings.model_fields[name].default
        configured = self.extra_env.get(f"LEDGER_DELETION_{name.upper()}", default)
        return str(TypeAdapter(int).validate_python(configured))

    def settings(self, phase: str) -> Settings:
        ep = self.endpoints
        return ep.settings(
            topic=self.topic(phase),
            task_queue_prefix=self.prefix(phase),
            colocate_pools=self.colocated,
        )


def steady_rate(times: list[float]) -> float:
    """Completions per second between the 5th and the 95th percentile completion (no start-up, no tail)."""
    ordered = sorted(times)
    low, high = int(len(ordered) * 0.05), int(len(ordered) * 0.95) - 1
    if high <= low or ordered[high] <= ordered[low]:
        return float("nan")
    return (high - low) / (ordered[high] - ordered[low])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


# --- publishing ------------------------------------------------------------------------------------------


def publish(settings: Settings, seeded: Seeded, rate: float | None = None) -> dict[str, float]:
    """Publish every request (at ``rate`` per second, or as fast as possible); workflow id → publish time."""
    times: dict[str, float] = {}
    with RequestPublisher(settings) as publisher:
        began = time.monotonic()
        for index, request in enumerate(seeded.requests):
            if rate:
                delay = began + index / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            times.setdefault(request.workflow_id, time.time())
            publisher.publish(request)
    return times


def publish_in_background(
    settings: Settings, seeded: Seeded, rate: float | None = None
) -> Callable[[], dict[str, float]]:
    result: dict[str, dict[str, float]] = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("t", publish(settings, seeded, rate)), daemon=True
    )
    thread.start()

    def join() -> dict[str, float]:
        thread.join()
        return result["t"]

    return join


# --- A: the service --------------------------------------------------------------------------------------


@dataclass
class Closed:
    workflow_id: str
    close: float
    events: int
    outcome: str


async def wait_closed(client: Client, task_queue: str, count: int, timeout: float, what: str) -> None:
    query = f'TaskQueue = "{task_queue}" AND ExecutionStatus != "Running"'
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        try:
            closed = (await client.count_workflows(query)).count
        except RPCError as exc:
            print(f"  count failed: {exc}", flush=True)
            closed = last
        if closed >= count:
            return
        if closed != last:
            last = closed
            print(f"  {what}: {closed}/{count} closed", flush=True)
        # A count scans the server's visibility table: keep it rare on big runs, it costs server CPU.
        await asyncio.sleep(min(10.0, max(1.0, count / 10_000)))
    raise TimeoutError(f"{what}: only {last}/{count} closed after {timeout} s")


async def closed_workflows(client: Client, task_queue: str) -> list[Closed]:
    out: list[Closed] = []
    async for wf in client.list_workflows(f'TaskQueue = "{task_queue}"', page_size=1000):
        if wf.close_time is None:
            continue
        if wf.status is WorkflowExecutionStatus.COMPLETED:
            outcome = wf.typed_search_attributes.get(sa.DELETION_OUTCOME) or "?"
        else:
            outcome = wf.status.name if wf.status else "?"
        out.append(Closed(wf.id, wf.close_time.timestamp(), wf.history_length, str(outcome)))
    return out


@dataclass(frozen=True)
class Shape:
    """What a workflow asked of the server: activities scheduled, and how many of them in the first round."""

    activities: int
    first_round: int


async def history_sample(client: Client, ids: Iterable[str]) -> tuple[list[Shape], Counter[str]]:
    """The shape of every sampled workflow, and the event types of their histories."""
    kinds: Counter[str] = Counter()
    shapes = []
    for workflow_id in ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        names = [event.WhichOneof("attributes") or "" for event in history.events]
        kinds.update(names)
        # Activities scheduled by the same workflow task completion form one round.
        rounds = [
            event.activity_task_scheduled_event_attributes.workflow_task_completed_event_id
            for event in history.events
            if event.HasField("activity_task_scheduled_event_attributes")
        ]
        shapes.append(Shape(len(rounds), rounds.count(rounds[0]) if rounds else 0))
    return shapes, kinds


def start_pools(
    run: Run, phase: str, replicas: dict[str, int], env: dict[str, str], faulty: bool
) -> list[Proc]:
    procs = []
    # Colocated: every pool in each process, on one task queue (eager activities).
    pools: tuple[str, ...] = ("all",) if run.colocated else POOL_NAMES
    for pool in pools:
        for replica in range(replicas.get(pool, 1)):
            # The plain CLI unless a wrapper is needed: fault injection, or a second pulsar-pool process (its
            # consumer ids must not collide with the first one's on pulsar-lite; see bench/worker.py).
            wrapped = faulty or (pool in ("pulsar", "all") and replica > 0)
            argv = (
                [sys.executable, str(ROOT / "bench" / "worker.py"), "worker", "--pool", pool]
                if wrapped
                else [str(VENV_BIN / "ledger-deletion"), "worker", "--pool", pool]
            )
            proc_env = {**env, CONSUMER_OFFSET_ENV: str(replica)} if pool in ("pulsar", "all") else env
            procs.append(spawn(f"{phase}-{pool}-{replica}", argv, proc_env, run.logs))
    for proc in procs:
        wait_for_line(proc, "running (ack queue")
    return procs


@dataclass
class AResult:
    n: int
    seconds: float
    rate: float
    steady_rate: float = 0.0
    events_happy: float = 0.0
    events_all: float = 0.0
    activities_per_wf: float = 0.0
    shapes: list[Shape] = field(default_factory=list)
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    wrong: int = 0
    missing: int = 0  # requests published whose workflow never closed
    unacked: int = -1  # messages still in the subscription once the pools stopped (-1: not counted)
    storage_problems: list[str] = field(default_factory=list)
    procs: dict[str, dict[str, float]] = field(default_factory=dict)
    servers_cpu: dict[str, float] = field(default_factory=dict)
    event_kinds: dict[str, int] = field(default_factory=dict)


async def run_a(
    run: Run,
    phase: str,
    seeded: Seeded,
    *,
    rate: float | None = None,
    replicas: dict[str, int] | None = None,
    fault_rate: float = 0.0,
    stack_procs: StackProcs | None = None,
    sample_histories: int = 0,
    timeout: float | None = None,
) -> AResult:
    timeout = timeout or max(3600.0, len(seeded.items) / 2)  # gives up only below 2 deletions/s
    env = run.settings_env(phase, {FAULT_RATE_ENV: str(fault_rate)} if fault_rate else None)
    procs = start_pools(run, phase, replicas or {}, env, faulty=fault_rate > 0)
    try:
        for proc in procs:
            proc.mark()
        if stack_procs:
            stack_procs.mark(phase)
        began = time.time()
        join = publish_in_background(run.settings(phase), seeded, rate)
        queue = run.settings(phase).task_queue("workflow")
        sampler = asyncio.create_task(_sample_forever(procs))
        await wait_closed(run.client, queue, len(seeded.items), timeout, f"A {phase}")
        sampler.cancel()
        for proc in procs:
            proc.sample()
        published = join()
        servers = stack_procs.cpu() if stack_procs else {}
    finally:
        for proc in procs:
            proc.stop()
    # Nothing lost: with every pool stopped, whatever Pulsar would still hand out was never acked.
    unacked = await asyncio.to_thread(count_redeliverable, run.settings(phase))
    closed = await closed_workflows(run.client, queue)
    expected = {item.request.workflow_id: item for item in seeded.items}
    by_id = {c.workflow_id: c for c in closed if c.workflow_id in expected}
    end = max(c.close for c in by_id.values())
    happy = [c for c in by_id.values() if c.outcome == Outcome.DELETED.value]
    timed = [
        (by_id[w].close - published[w]) * 1000
        for w, item in expected.items()
        if item.kind != "in-use" and w in by_id
    ]
    result = AResult(
        n=len(by_id),
        seconds=end - began,
        rate=len(by_id) / (end - began),
        steady_rate=steady_rate([c.close for c in by_id.values()]),
        events_happy=statistics.mean(c.events for c in happy) if happy else 0,
        events_all=statistics.mean(c.events for c in by_id.values()),
        p50_ms=percentile(timed, 50),
        p95_ms=percentile(timed, 95),
        p99_ms=percentile(timed, 99),
        outcomes=dict(Counter(c.outcome for c in by_id.values())),
        wrong=sum(1 for w, item in expected.items() if w in by_id and by_id[w].outcome != item.outcome.value),
        missing=sum(1 for w in expected if w not in by_id),
        unacked=unacked,
        storage_problems=seeded.check_storage(run.cluster, sample=run.storage_sample)[:20],
        procs={p.name: {"cpu_s": round(p.cpu_s, 1), "rss_mb": round(p.rss_mb)} for p in procs},
        servers_cpu=servers,
    )
    if sample_histories:
        ids = sorted(by_id)
        ids = random.Random(0).sample(ids, min(sample_histories, len(ids)))
        result.shapes, kinds = await history_sample(run.client, ids)
        result.activities_per_wf = statistics.mean(s.activities for s in result.shapes)
        result.event_kinds = dict(kinds)
    return result


async def _sample_forever(procs: list[Proc]) -> None:
    while True:
        for proc in procs:
            proc.sample()
        await asyncio.sleep(2)


# --- B: the PIP-186 consumer ------------------------------------------------------------------------------


@dataclass
class BResult:
    n: int
    seconds: float
    rate: float
    steady_rate: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    outcomes: dict[str, int]
    reconsumed: int
    faults_injected: int
    cpu_s: float
    rss_mb: float
    storage_problems: list[str]
    resubscribed: int = 0  # times the consumer replaced a stalled subscription (pulsar-lite)


def run_b(
    run: Run,
    phase: str,
    seeded: Seeded,
    *,
    fault_rate: float = 0.0,
    reconsume_seconds: float,
    rate: float | None = None,
    timeout: float | None = None,
) -> BResult:
    # Room for every reconsume round PIP-186 allows (10) plus the work itself.
    timeout = timeout or max(3600.0, reconsume_seconds * 11 + 600)
    env = run.settings_env(phase, {FAULT_RATE_ENV: str(fault_rate)} if fault_rate else None)
    results = run.logs / f"{phase}-pip186.json"
    argv = [
        sys.executable,
        str(ROOT / "bench" / "pip186_consumer.py"),
        "--expect",
        str(len(seeded.items)),
        "--results",
        str(results),
        "--reconsume-seconds",
        str(reconsume_seconds),
        "--timeout",
        str(timeout),
    ]
    proc = spawn(f"{phase}-pip186", argv, env, run.logs)
    try:
        wait_for_line(proc, "pip186 consumer ready")
        proc.mark()
        began = time.time()
        publish(run.settings(phase), seeded, rate)
        while proc.popen.poll() is None:
            proc.sample()
            time.sleep(0.5)
    finally:
        proc.stop()
    data = json.loads(results.read_text())
    seconds = data["last_ack"] - began
    latencies = data["latencies_ms"]
    return BResult(
        n=data["done"],
        seconds=seconds,
        rate=data["done"] / seconds,
        steady_rate=steady_rate(data["ack_times"]),
        p50_ms=percentile(latencies, 50),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        outcomes=data["outcomes"],
        reconsumed=data["reconsumed"],
        faults_injected=data["faults_injected"],
        cpu_s=round(proc.cpu_s, 1),
        rss_mb=round(proc.rss_mb),
        storage_problems=seeded.check_storage(run.cluster, sample=run.storage_sample)[:20],
        resubscribed=data.get("resubscribed", 0),
    )


# --- C: the orchestration limit ---------------------------------------------------------------------------


@dataclass
class CResult:
    n: int
    activities: float  # mean per workflow (the shapes are A's)
    first_round: float
    seconds: float
    rate: float
    steady_rate: float
    procs: dict[str, dict[str, float]]
    servers_cpu: dict[str, float]


async def run_c(
    run: Run, n: int, shapes: list[Shape], stack_procs: StackProcs, timeout: float = 3600
) -> CResult:
    """N trivial workflows, the i-th shaped like ``shapes[i % len(shapes)]`` (A's sampled histories)."""
    queue = f"{run.prefix('c')}-trivial"
    roles = ("both",) if run.colocated else ("workflow", "activity")
    activity_queue = queue if run.colocated else f"{queue}-activities"
    procs = [
        spawn(
            f"c-{role}",
            [
                sys.executable,
                str(ROOT / "bench" / "orchestration_limit.py"),
                "--address",
                run.endpoints.temporal_address,
                "--queue",
                queue,
                "--role",
                role,
                "--pollers",
                run.pollers(role),
                *(["--sandbox"] if run.sandboxed else []),
            ],
            run.base_env,
            run.logs,
        )
        for role in roles
    ]
    try:
        for proc in procs:
            wait_for_line(proc, "worker running")
            proc.mark()
        stack_procs.mark("c")
        began = time.time()
        starting, running = asyncio.Semaphore(32), asyncio.Semaphore(run.inflight)

        async def start(index: int) -> None:
            # As the ingest loop: at most 32 starts at a time, at most ``inflight`` workflows not closed.
            shape = shapes[index % len(shapes)]
            async with running:
                async with starting:
                    handle = await run.client.start_workflow(
                        TRIVIAL_WORKFLOW,
                        args=[shape.activities, activity_queue, shape.first_round],
                        id=f"{queue}/{index}",
                        task_queue=queue,
                    )
                await handle.result()

        starts = asyncio.gather(*(start(i) for i in range(n)))
        await wait_closed(run.client, queue, n, timeout, "C")
        await starts
        for proc in procs:
            proc.sample()
        servers = stack_procs.cpu()
    finally:
        for proc in procs:
            proc.stop()
    closed = await closed_workflows(run.client, queue)
    end = max(c.close for c in closed)
    used = [shapes[i % len(shapes)] for i in range(n)]
    return CResult(
        n=len(closed),
        activities=statistics.mean(s.activities for s in used),
        first_round=statistics.mean(s.first_round for s in used),
        seconds=end - began,
        rate=len(closed) / (end - began),
        steady_rate=steady_rate([c.close for c in closed]),
        procs={p.name: {"cpu_s": round(p.cpu_s, 1), "rss_mb": round(p.rss_mb)} for p in procs},
        servers_cpu=servers,
    )


# --- main ------------------------------------------------------------------------------------------------


def pin_server(stack: Stack) -> None:
    """The Temporal server alone on CPU 0: A and C are then bound by what one core of server can orchestrate,
    as when the server has a machine of its own (everything else this run starts inherits CPU 1)."""
    server = stack.pid("temporal")
    assert server is not None, "--pin-server needs the stack started by this run (no --keep-state)"
    for task in Path(f"/proc/{server}/task").iterdir():
        os.sched_setaffinity(int(task.name), {0})


def restart_temporal_empty(stack: Stack) -> None:
    """Stop the Temporal server, delete its database and start it again."""
    ServiceControl(stack).stop("temporal")
    for path in (stack.state_dir / "data").glob("temporal.db*"):
        path.unlink()
    ServiceControl(stack).start()


async def empty_temporal_database(stack: Stack, run: Run, pinned: bool) -> None:
    """Restart the Temporal server on an empty database, so C starts where A started.

    The dev server's cost per workflow grows with its database within minutes (plain trivial workflows:
    65 → 75 → 108 ms of server CPU over 3,000 workflows in ``bench/server_cost.py``), so a C measured
    after A on A's database would be handicapped.
    """
    restart_temporal_empty(stack)
    if pinned:
        pin_server(stack)
    run.client = await Client.connect(run.endpoints.temporal_address)


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def parse_replicas(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        pool, count = part.split("=")
        out[pool] = int(count)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack(args.state_dir, bench_ports(args.port_base))
    if not args.keep_state:
        # Every run on an empty Temporal database: a database grown by earlier runs (800 MB after a dozen)
        # makes each write dearer and the numbers drift from run to run.
        stack.down()
        shutil.rmtree(args.state_dir / "data", ignore_errors=True)
    if args.pin_server:
        # Everything this run starts (stack services, pools, C's workers) inherits CPU 1 ...
        os.sched_setaffinity(0, {1})
    endpoints = stack.up()
    if args.pin_server:
        pin_server(stack)
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
            await empty_temporal_database(stack, run, args.pin_server)
            stack_procs = StackProcs.of(stack, args.profile_server)
        c = await run_c(run, n, shapes, stack_procs)
        report["C"] = asdict(c)
        print(f"C: {c.rate:.1f} workflows/s ({c.activities:.2f} activities per workflow)", flush=True)
        report["rounds"] = [asdict(Round.of(a, c))]
        # One pair of runs says little about A/C (the same code printed 0.83 to 0.91 in a row): more pairs,
        # A and C alternating, each on an empty database, and the ratio taken as their median.
        for index in range(2, args.rounds + 1):
            phase = f"a{index}"
            await empty_temporal_database(stack, run, args.pin_server)
            more_a = await run_a(
                run, phase, seeded(phase, n), replicas=replicas, stack_procs=StackProcs.of(stack)
            )
            await empty_temporal_database(stack, run, args.pin_server)
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
        )


def _server_ms(servers_cpu: dict[str, float], workflows: int) -> float:
    seconds = servers_cpu.get("temporal")
    return seconds * 1000 / workflows if seconds is not None and workflows else math.nan


def a_over_c(report: dict[str, Any]) -> float:
    """A/C of the run: the median over ``--rounds`` pairs, or the one pair's ratio."""
    rounds = report.get("rounds") or []
    if rounds:
        return float(statistics.median(r["ratio"] for r in rounds))
    c = report.get("C")
    return report["A"]["rate"] / c["rate"] if c else float("nan")


def print_table(report: dict[str, Any]) -> str:
    a, b, c = report["A"], report.get("B"), report.get("C")
    half = report.get("A_half")
    lines = [
        f"N={report['n']}  run {report['run_id']}  load avg {report['load_before']} -> {report['load_after']}"
        f"  replicas {report['replicas'] or 'one per pool'}  in-flight {report.get('inflight')}"
        f"{'  server pinned to CPU 0' if report.get('pin_server') else ''}"
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
    parser.add_argument(
        "--pin-server",
        action="store_true",
        help="Temporal server alone on CPU 0, everything else on CPU 1 (server-bound A/C)",
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
