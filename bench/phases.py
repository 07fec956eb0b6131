"""One benchmark phase: what it runs (the pools, the PIP-186 consumer) and what it measures (counts per shape
from the histories, CPU and RSS per process, rates and latencies, and whether every request ended as it
must); the run's configuration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from bench.faults import FAULT_RATE_ENV
from bench.histories import Counts, fetch_counts
from bench.mix import SHAPES, WAITING_SHAPES, LateTrims, Seeded
from bench.processes import ROOT, Proc, StackProcs, spawn, usage, wait_for_line
from bench.worker import CONSUMER_OFFSET_ENV
from devstack.cluster import SimulatedCluster
from devstack.faults import count_redeliverable
from devstack.stack import StackEndpoints
from ledger_deletion import search_attributes as sa
from ledger_deletion.contracts import Outcome, Step
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher

VENV_BIN = Path(sys.executable).parent
POOL_NAMES = ("workflow", "pulsar", "bookkeeper", "offload")
# The in-use grace: production's number of re-checks, a short wait between them (production: 60 s) so that
# in-use and late requests stay in the mix without making a run wait minutes for them.
IN_USE_RECHECK_SECONDS = 2.0


# --- the run's configuration -----------------------------------------------------------------------------


@dataclass
class Run:
    endpoints: StackEndpoints
    run_id: str
    logs: Path
    cluster: SimulatedCluster
    client: Client
    base_env: dict[str, str]
    inflight: int = 100  # received-not-acked messages per pulsar process
    extra_env: dict[str, str] = field(default_factory=dict)  # more LEDGER_DELETION_* settings for the pools
    storage_sample: int = 2000  # ledgers/objects checked in ZooKeeper and S3 after a phase; 0 = all

    def settings_env(self, phase: str, fault_rate: float = 0.0) -> dict[str, str]:
        """The pools' and B's environment for ``phase``; with ``fault_rate``, that share of deletes fails."""
        env = {
            **self.base_env,
            "LEDGER_DELETION_TOPIC": self.topic(phase),
            "LEDGER_DELETION_TASK_QUEUE_PREFIX": self.prefix(phase),
            "LEDGER_DELETION_METRICS_PORT": "0",
            "LEDGER_DELETION_TEMPORAL_METRICS_PORT": "0",
            "LEDGER_DELETION_IN_USE_RECHECK_SECONDS": str(IN_USE_RECHECK_SECONDS),
            "LEDGER_DELETION_SHUTDOWN_GRACE_SECONDS": "2",
            "LEDGER_DELETION_INGEST_MAX_INFLIGHT": str(self.inflight),
            **self.extra_env,
        }
        return {**env, FAULT_RATE_ENV: str(fault_rate)} if fault_rate else env

    def topic(self, phase: str) -> str:
        return f"persistent://pulsar/system/__ledger_deletion_bench_{self.run_id}_{phase}"

    def prefix(self, phase: str) -> str:
        return f"ldb-{self.run_id}-{phase}"

    @property
    def colocated(self) -> bool:
        # Parsed as the pools' settings parse it ("1", "yes", "on" count as true too).
        return TypeAdapter(bool).validate_python(
            self.extra_env.get("LEDGER_DELETION_COLOCATE_POOLS", "false")
        )

    def settings(self, phase: str) -> Settings:
        return self.endpoints.settings(
            topic=self.topic(phase), task_queue_prefix=self.prefix(phase), colocate_pools=self.colocated
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


def ledger_ok(expected: Outcome, outcomes: list[str]) -> bool:
    """Did the messages (B) or runs (A) of one ledger end as the mix says? A duplicate's second one may find
    the ledger already deleted by the first."""
    allowed = {expected.value} | ({Outcome.ALREADY_DELETED.value} if expected is Outcome.DELETED else set())
    return expected.value in outcomes and set(outcomes) <= allowed


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
    run_id: str
    close: float
    events: int
    outcome: str


async def wait_closed(client: Client, task_queue: str, count: int, timeout: float, what: str) -> None:
    """Until ``count`` runs on the queue closed and none is running (a duplicate may start a second run)."""
    closed_query = f'TaskQueue = "{task_queue}" AND ExecutionStatus != "Running"'
    running_query = f'TaskQueue = "{task_queue}" AND ExecutionStatus = "Running"'
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        try:
            closed = (await client.count_workflows(closed_query)).count
            running = (await client.count_workflows(running_query)).count if closed >= count else 1
        except RPCError as exc:
            print(f"  count failed: {exc}", flush=True)
            closed, running = last, 1
        if closed >= count and not running:
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
        out.append(Closed(wf.id, wf.run_id, wf.close_time.timestamp(), wf.history_length, str(outcome)))
    return out


async def release_late_trims(client: Client, task_queue: str, late: LateTrims, stop: asyncio.Event) -> None:
    """Hand :class:`LateTrims` every run waiting out its in-use grace (``DeletionStep``, upserted when the
    first check finds the ledger in use) until ``stop``; the grace's re-check then finds it released."""
    query = (
        f'TaskQueue = "{task_queue}" AND ExecutionStatus = "Running" '
        f'AND {sa.DELETION_STEP.name} = "{Step.WAIT_IN_USE.value}"'
    )
    while not stop.is_set() and late.pending:
        try:
            waiting = [wf.id async for wf in client.list_workflows(query, page_size=1000)]
        except RPCError as exc:
            print(f"  late trims: listing failed: {exc}", flush=True)
            waiting = []
        await asyncio.to_thread(late.found_in_use, waiting)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=0.25)


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
class ShapeRow:
    """One shape's requests: how many, how they ended, and (A) what their runs cost or (B) how often their
    messages were delivered."""

    ledgers: int = 0
    messages: int = 0
    wrong: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # A: Counts summed over the shape's runs
    # A: the most common (events, workflow tasks) of the shape's ledgers: the path's own cost, which no
    # timed-out task or result split across two tasks on a busy machine changes
    typical: list[int] = field(default_factory=list)
    deliveries: int = 0  # B: deliveries of the shape's messages (first delivery and every reconsume)


@dataclass
class AResult:
    n: int  # messages published
    seconds: float
    rate: float
    steady_rate: float = 0.0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    wrong: int = 0
    missing: int = 0  # ledgers whose workflow never closed
    unacked: int = -1  # messages still in the subscription once the pools stopped (-1: not counted)
    storage_problems: list[str] = field(default_factory=list)
    late_released: int = 0
    procs: dict[str, dict[str, float]] = field(default_factory=dict)
    servers_cpu: dict[str, float] = field(default_factory=dict)
    server_work: dict[str, float] = field(default_factory=dict)  # --server-metrics: the server's counts
    counted: bool = False  # the histories were read: ``shapes`` and ``totals`` hold their counts
    shapes: dict[str, ShapeRow] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)  # Counts over every run of the phase
    history_lengths: int = 0  # the runs' history lengths as visibility lists them, summed


async def run_a(
    run: Run,
    phase: str,
    seeded: Seeded,
    *,
    rate: float | None = None,
    replicas: dict[str, int] | None = None,
    fault_rate: float = 0.0,
    stack_procs: StackProcs | None = None,
    count_histories: bool = False,
    timeout: float | None = None,
) -> AResult:
    timeout = timeout or max(3600.0, len(seeded.items) / 2)  # gives up only below 2 deletions/s
    env = run.settings_env(phase, fault_rate)
    expected = seeded.by_ledger()
    late = LateTrims(run.cluster, seeded)
    procs = start_pools(run, phase, replicas or {}, env, faulty=fault_rate > 0)
    queue = run.settings(phase).task_queue("workflow")
    stop = asyncio.Event()
    try:
        for proc in procs:
            proc.mark()
        if stack_procs:
            stack_procs.mark()
        began = time.time()
        join = publish_in_background(run.settings(phase), seeded, rate)
        sampler = asyncio.create_task(_sample_forever(procs))
        releaser = asyncio.create_task(release_late_trims(run.client, queue, late, stop))
        await wait_closed(run.client, queue, len(expected), timeout, f"A {phase}")
        stop.set()
        sampler.cancel()
        await releaser
        for proc in procs:
            proc.sample()
        published = join()
        servers = stack_procs.cpu() if stack_procs else {}
        work = stack_procs.work(len(seeded.items)) if stack_procs else {}
    finally:
        stop.set()
        for proc in procs:
            proc.stop()
    # Nothing lost: with every pool stopped, whatever Pulsar would still hand out was never acked.
    unacked = await asyncio.to_thread(count_redeliverable, run.settings(phase))
    closed = [c for c in await closed_workflows(run.client, queue) if c.workflow_id in expected]
    runs: dict[str, list[Closed]] = defaultdict(list)
    for c in closed:
        runs[c.workflow_id].append(c)
    end = max(c.close for c in closed)
    first_close = {w: min(c.close for c in rs) for w, rs in runs.items()}
    timed = [
        (first_close[w] - published[w]) * 1000
        for w, item in expected.items()
        if item.shape not in WAITING_SHAPES and w in first_close
    ]
    messages = Counter(item.workflow_id for item in seeded.items)
    shapes = {shape: ShapeRow() for shape in SHAPES}
    for w, item in expected.items():
        row = shapes[item.shape]
        row.ledgers += 1
        row.messages += messages[w]
        row.wrong += not ledger_ok(item.outcome, [c.outcome for c in runs.get(w, [])])
    result = AResult(
        n=len(seeded.items),
        seconds=end - began,
        rate=len(seeded.items) / (end - began),
        steady_rate=steady_rate([c.close for c in closed]),
        p50_ms=percentile(timed, 50),
        p95_ms=percentile(timed, 95),
        p99_ms=percentile(timed, 99),
        outcomes=dict(Counter(c.outcome for c in closed)),
        wrong=sum(row.wrong for row in shapes.values()),
        missing=sum(1 for w in expected if w not in runs),
        unacked=unacked,
        storage_problems=seeded.check_storage(run.cluster, sample=run.storage_sample)[:20],
        late_released=late.released,
        procs=usage(procs),
        servers_cpu=servers,
        server_work=work,
        history_lengths=sum(c.events for c in closed),
    )
    if count_histories:
        counts = await fetch_counts(run.client, [(c.workflow_id, c.run_id) for c in closed])
        by_shape: dict[str, Counts] = defaultdict(Counts)
        by_ledger: dict[str, Counts] = defaultdict(Counts)
        for (workflow_id, _), one in counts.items():
            by_shape[expected[workflow_id].shape] += one
            by_ledger[workflow_id] += one
        typical: dict[str, Counter[tuple[int, int]]] = defaultdict(Counter)
        for workflow_id, ledger in by_ledger.items():
            typical[expected[workflow_id].shape][ledger.events, ledger.workflow_tasks] += 1
        for shape, row in shapes.items():
            row.counts = asdict(by_shape[shape])
            row.typical = list(typical[shape].most_common(1)[0][0]) if typical[shape] else []
        result.totals = asdict(sum(counts.values(), Counts()))
        result.counted = True
    result.shapes = {shape: row for shape, row in shapes.items() if row.ledgers}
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
    wrong: int = 0
    deliveries: int = 0
    late_released: int = 0
    servers_cpu: dict[str, float] = field(default_factory=dict)
    shapes: dict[str, ShapeRow] = field(default_factory=dict)
    resubscribed: int = 0  # times the consumer replaced a stalled subscription (pulsar-lite)


class InUseReports:
    """Follows the file where B writes the workflow id of each request it found in use (for LateTrims)."""

    def __init__(self, path: Path, late: LateTrims) -> None:
        self._path, self._late = path, late
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> InUseReports:
        self._path.touch()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _follow(self) -> None:
        partial = ""
        with self._path.open() as reports:
            while not self._stop.is_set():
                *lines, partial = (partial + reports.read()).split("\n")
                self._late.found_in_use(lines)
                self._stop.wait(0.1)


def run_b(
    run: Run,
    phase: str,
    seeded: Seeded,
    *,
    fault_rate: float = 0.0,
    reconsume_seconds: float,
    stack_procs: StackProcs | None = None,
    timeout: float | None = None,
) -> BResult:
    # Room for every reconsume round PIP-186 allows (10) plus the work itself.
    timeout = timeout or max(3600.0, reconsume_seconds * 11 + 600)
    env = run.settings_env(phase, fault_rate)
    results = run.logs / f"{phase}-pip186.json"
    in_use = run.logs / f"{phase}-pip186-in-use.txt"
    argv = [
        sys.executable,
        str(ROOT / "bench" / "pip186_consumer.py"),
        "--expect",
        str(len(seeded.items)),
        "--results",
        str(results),
        "--in-use-report",
        str(in_use),
        "--reconsume-seconds",
        str(reconsume_seconds),
        "--timeout",
        str(timeout),
    ]
    late = LateTrims(run.cluster, seeded)
    proc = spawn(f"{phase}-pip186", argv, env, run.logs)
    try:
        with InUseReports(in_use, late):
            wait_for_line(proc, "pip186 consumer ready")
            proc.mark()
            if stack_procs:
                stack_procs.mark()
            began = time.time()
            publish(run.settings(phase), seeded)
            while proc.popen.poll() is None:
                proc.sample()
                time.sleep(0.5)
            servers = stack_procs.cpu() if stack_procs else {}
    finally:
        proc.stop()
    data = json.loads(results.read_text())
    handled: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in data["messages"]:
        handled[message["id"]].append(message)
    shapes = {shape: ShapeRow() for shape in SHAPES}
    for w, item in seeded.by_ledger().items():
        row = shapes[item.shape]
        row.ledgers += 1
        row.messages += len(handled[w])
        row.deliveries += sum(m["deliveries"] for m in handled[w])
        row.wrong += not ledger_ok(item.outcome, [m["outcome"] for m in handled[w]])
    shape_of = {item.workflow_id: item.shape for item in seeded.items}
    latencies = [m["latency_ms"] for m in data["messages"] if shape_of.get(m["id"]) not in WAITING_SHAPES]
    seconds = data["last_ack"] - began
    return BResult(
        n=data["done"],
        seconds=seconds,
        rate=data["done"] / seconds,
        steady_rate=steady_rate([m["acked"] for m in data["messages"]]),
        p50_ms=percentile(latencies, 50),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        outcomes=data["outcomes"],
        reconsumed=data["reconsumed"],
        faults_injected=data["faults_injected"],
        cpu_s=round(proc.cpu_s, 1),
        rss_mb=round(proc.rss_mb),
        storage_problems=seeded.check_storage(run.cluster, sample=run.storage_sample)[:20],
        wrong=sum(row.wrong for row in shapes.values()),
        deliveries=sum(row.deliveries for row in shapes.values()),
        late_released=late.released,
        servers_cpu={name: cpu for name, cpu in servers.items() if name != "temporal"},
        shapes={shape: row for shape, row in shapes.items() if row.ledgers},
        resubscribed=data.get("resubscribed", 0),
    )
