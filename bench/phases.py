"""One benchmark phase: what it runs (the pools, the PIP-186 consumer) and what it measures (rates,
latencies, history events, CPU and RSS per process); the run's configuration."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from bench.faults import FAULT_RATE_ENV
from bench.mix import Seeded
from bench.processes import (
    ROOT,
    Proc,
    StackProcs,
    spawn,
    usage,
    wait_for_line,
)
from bench.worker import CONSUMER_OFFSET_ENV
from devstack.cluster import SimulatedCluster
from devstack.faults import count_redeliverable
from devstack.stack import StackEndpoints
from ledger_deletion import search_attributes as sa
from ledger_deletion.contracts import Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher

VENV_BIN = Path(sys.executable).parent
POOL_NAMES = ("workflow", "pulsar", "bookkeeper", "offload")


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
        """The pools' environment for ``phase``; with ``fault_rate``, that share of deletes fails."""
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
        return {**env, FAULT_RATE_ENV: str(fault_rate)} if fault_rate else env

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


@dataclass
class HistorySample:
    """What sampled workflows asked of the server, in the order they were sampled."""

    kinds: Counter[str] = field(default_factory=Counter)  # event types, over every sampled history
    # Each workflow's state transitions as the server counted them (DescribeWorkflowExecution): every
    # mutable-state write, what a Temporal cluster's persistence capacity is sized by.
    transitions: list[int] = field(default_factory=list)


async def history_sample(client: Client, ids: Iterable[str]) -> HistorySample:
    """The event types and state transitions of every sampled workflow."""
    sample = HistorySample()
    for workflow_id in ids:
        handle = client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        described = await handle.describe()
        sample.transitions.append(described.raw_description.workflow_execution_info.state_transition_count)
        sample.kinds.update(event.WhichOneof("attributes") or "" for event in history.events)
    return sample


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
    server_work: dict[str, float] = field(default_factory=dict)  # --server-metrics: the server's counts
    event_kinds: dict[str, int] = field(default_factory=dict)
    transitions: float = 0.0  # state transitions per workflow, over the sampled histories
    transitions_happy: float = 0.0  # the same, over the sampled DELETED ones
    head_seconds: float = 0.0  # publish of the first request to the first close
    tail_seconds: float = 0.0  # the 95th percentile close to the last


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
    env = run.settings_env(phase, fault_rate)
    procs = start_pools(run, phase, replicas or {}, env, faulty=fault_rate > 0)
    try:
        for proc in procs:
            proc.mark()
        if stack_procs:
            stack_procs.mark()
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
        work = stack_procs.work(len(seeded.items)) if stack_procs else {}
    finally:
        for proc in procs:
            proc.stop()
    # Nothing lost: with every pool stopped, whatever Pulsar would still hand out was never acked.
    unacked = await asyncio.to_thread(count_redeliverable, run.settings(phase))
    closed = await closed_workflows(run.client, queue)
    expected = {item.request.workflow_id: item for item in seeded.items}
    by_id = {c.workflow_id: c for c in closed if c.workflow_id in expected}
    end = max(c.close for c in by_id.values())
    in_order = sorted(by_id.values(), key=lambda c: c.close)
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
        procs=usage(procs),
        servers_cpu=servers,
        server_work=work,
        head_seconds=in_order[0].close - began,
        tail_seconds=end - in_order[int(len(in_order) * 0.95) - 1].close,
    )
    if sample_histories:
        ids = sorted(by_id)
        ids = random.Random(0).sample(ids, min(sample_histories, len(ids)))
        sample = await history_sample(run.client, ids)
        scheduled = sample.kinds["activity_task_scheduled_event_attributes"]
        result.activities_per_wf = scheduled / len(ids)
        result.event_kinds = dict(sample.kinds)
        result.transitions = statistics.mean(sample.transitions)
        deleted = Outcome.DELETED.value
        pairs = zip(ids, sample.transitions, strict=True)
        of_deletions = [n for w, n in pairs if by_id[w].outcome == deleted]
        result.transitions_happy = statistics.mean(of_deletions) if of_deletions else 0.0
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
    env = run.settings_env(phase, fault_rate)
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
