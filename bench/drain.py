"""A bulk submission draining through the service: N requests published at once, as ``reconcile --submit``
does after a first scan, and the pools left to decide every one of them.

While it drains, every ``sample_seconds`` it records the deletion topic's backlog (the admin REST's
``msgBacklog`` of the service's subscription), Temporal's (runs open, runs closed, each task queue's
approximate backlog from ``DescribeTaskQueue``), each pool process's resident memory (``VmRSS``, not the
high-water mark: flat memory is the question) and the CPU seconds of the pools and of the stack's servers.
After it: every request's outcome against the mix, nothing dead-lettered, nothing left unacked, the storage
as expected, and the delete rate per second (each delete's dispatch, from the histories:
``bench/delete_times.py``) against the configured task-queue rate limits
(``LEDGER_DELETION_BK_DELETES_PER_SECOND``, ``LEDGER_DELETION_OFFLOAD_DELETES_PER_SECOND``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import RateLimitSource, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from bench.delete_times import fetch_delete_starts, peak_rate
from bench.mix import LateTrims, Seeded
from bench.phases import (
    Closed,
    Run,
    closed_workflows,
    ledger_ok,
    publish_in_background,
    release_late_trims,
    start_pools,
    steady_rate,
)
from bench.processes import Proc, StackProcs, cpu_seconds
from devstack.faults import count_redeliverable
from ledger_deletion.contracts import Outcome
from ledger_deletion.errors import LedgerDeletionError
from ledger_deletion.ops.inflight import subscription_backlog
from ledger_deletion.settings import Settings

# The task queues whose backlog is sampled, and the type of task each holds.
QUEUES = {
    "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    "bookkeeper": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    "offload": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    "pulsar": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}
# The settings that bound the delete rate, by the kind of delete (the task queue) they bound.
LIMIT_SETTINGS = {
    "bookkeeper": "LEDGER_DELETION_BK_DELETES_PER_SECOND",
    "offload": "LEDGER_DELETION_OFFLOAD_DELETES_PER_SECOND",
}
# Windows the peak delete rate is taken over. The server's limiter is a token bucket: over w seconds it lets
# through limit × w plus its burst, so a short window shows the burst and a long one the limit itself.
PEAK_WINDOWS = (1.0, 10.0, 60.0)


def vm_rss_mb(pid: int) -> float:
    """Resident memory now (``VmRSS``); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Sample:
    """The drain at one moment, ``t`` seconds after publishing began."""

    t: float
    closed: int  # runs closed (decided and acked)
    running: int  # runs open
    topic_backlog: int  # the subscription's msgBacklog (-1: the admin REST did not answer)
    queue_backlog: dict[str, int]  # task queue → approximate backlog (-1: not answered)
    rss_mb: dict[str, float]  # pool process → VmRSS
    cpu_s: float  # pools and servers together since the start


@dataclass
class DrainResult:
    replicas: int  # processes of each pool
    n: int  # messages published
    ledgers: int  # requests decided (a duplicate's two messages are one)
    seconds: float  # first publish → last close
    rate: float  # ledgers decided per second over ``seconds``
    steady_rate: float  # between the 5th and the 95th percentile close
    publish_seconds: float = 0.0
    complete: bool = True  # every request decided (false: stopped early, ``missing`` still undecided)
    outcomes: dict[str, int] = field(default_factory=dict)
    wrong: int = 0
    missing: int = 0
    dead_lettered: int = 0
    unacked: int = -1
    storage_problems: list[str] = field(default_factory=list)
    deletes: dict[str, int] = field(default_factory=dict)  # bookkeeper / offload → delete activities started
    peak_rate: dict[str, dict[str, float]] = field(default_factory=dict)  # kind → window → deletes/s
    mean_delete_rate: dict[str, float] = field(default_factory=dict)  # kind → deletes / drain seconds
    limits: dict[str, float] = field(default_factory=dict)  # kind → configured deletes/s (0: none)
    server_limits: dict[str, float] = field(default_factory=dict)  # kind → what the server says it applies
    rss_mb: dict[str, dict[str, float]] = field(default_factory=dict)  # process → start / middle / end
    pools_cpu_s: dict[str, float] = field(default_factory=dict)
    servers_cpu_s: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)

    @property
    def cpu_s(self) -> float:
        return sum(self.pools_cpu_s.values()) + sum(self.servers_cpu_s.values())


async def _count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def queue_backlog(client: Client, task_queue: str, kind: TaskQueueType.ValueType) -> tuple[int, float]:
    """The task queue's approximate backlog and the rate limit the server applies to it (0: its default)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=kind,
        report_stats=True,
    )
    response = await client.workflow_service.describe_task_queue(request)
    limit = response.effective_rate_limit
    # A worker's max_task_queue_activities_per_second is the setting under test; the rest is the server's own.
    from_worker = limit.rate_limit_source == RateLimitSource.RATE_LIMIT_SOURCE_WORKER
    return response.stats.approximate_backlog_count, limit.requests_per_second if from_worker else 0.0


class Sampler:
    """Samples the drain until stopped; keeps each pool process's RSS at the start, half-way and the end."""

    def __init__(
        self, run: Run, phase: str, settings: Settings, procs: list[Proc], stack_procs: StackProcs, count: int
    ) -> None:
        self._run, self._settings, self._procs, self._stack = run, settings, procs, stack_procs
        self._count = count
        self._queue = settings.task_queue("workflow")
        self.samples: list[Sample] = []
        self.rss: dict[str, dict[str, float]] = {p.name: {"start": vm_rss_mb(p.pid)} for p in procs}
        self.server_limits: dict[str, float] = {}
        self._began = time.time()
        self._cpu_start = sum(cpu_seconds(p.pid) for p in procs) + sum(stack_procs.start.values())

    def start(self) -> None:
        self._began = time.time()

    def _rss_now(self, when: str) -> None:
        for proc in self._procs:
            self.rss[proc.name].setdefault(when, vm_rss_mb(proc.pid))

    async def sample(self) -> Sample:
        client = self._run.client
        queue = self._queue
        try:
            closed = await _count(client, f'TaskQueue = "{queue}" AND ExecutionStatus != "Running"')
            running = await _count(client, f'TaskQueue = "{queue}" AND ExecutionStatus = "Running"')
        except RPCError as exc:
            print(f"  count failed: {exc}", flush=True)
            closed, running = -1, -1
        backlogs: dict[str, int] = {}
        for pool, kind in QUEUES.items():
            try:
                backlogs[pool], limit = await queue_backlog(client, self._settings.task_queue(pool), kind)
            except RPCError:
                backlogs[pool] = -1
                continue
            if limit:
                self.server_limits[pool] = limit
        try:
            topic = (await asyncio.to_thread(subscription_backlog, self._settings, [self._settings.topic]))[
                self._settings.topic
            ]
        except (LedgerDeletionError, OSError, ValueError) as exc:
            print(f"  topic backlog unavailable: {exc}", flush=True)
            topic = -1
        cpu = sum(cpu_seconds(p.pid) for p in self._procs) + sum(
            cpu_seconds(pid) for pid in self._stack.pids.values()
        )
        sample = Sample(
            t=round(time.time() - self._began, 1),
            closed=closed,
            running=running,
            topic_backlog=topic,
            queue_backlog=backlogs,
            rss_mb={p.name: round(vm_rss_mb(p.pid), 1) for p in self._procs},
            cpu_s=round(cpu - self._cpu_start, 1),
        )
        self.samples.append(sample)
        if closed >= self._count / 2:
            self._rss_now("middle")
        print(
            f"  t={sample.t:>6.0f}s closed {closed}/{self._count} open {running} topic backlog {topic} "
            f"queues {backlogs} cpu {sample.cpu_s:.0f}s",
            flush=True,
        )
        return sample

    def end(self) -> None:
        self._rss_now("middle")  # a drain shorter than one sample period
        self._rss_now("end")


async def run_drain(
    run: Run,
    phase: str,
    seeded: Seeded,
    *,
    replicas: int,
    stack_procs: StackProcs,
    sample_seconds: float = 10.0,
    stop_after: float | None = None,
) -> DrainResult:
    """Publish every request of ``seeded`` at once to pools of ``replicas`` processes each; until every run
    closed (decided and acked), sampling the backlogs, memory and CPU. With ``stop_after`` (seconds), a
    drain not done by then stops there and reports what was decided so far (``complete`` false)."""
    expected = seeded.by_ledger()
    settings = run.settings(phase)
    env = run.settings_env(phase)
    late = LateTrims(run.cluster, seeded)
    procs = start_pools(
        run, phase, dict.fromkeys(("workflow", "pulsar", "bookkeeper", "offload"), replicas), env, False
    )
    stop = asyncio.Event()
    try:
        for proc in procs:
            proc.mark()
        stack_procs.mark()
        sampler = Sampler(run, phase, settings, procs, stack_procs, len(expected))
        began = time.time()
        sampler.start()
        join = publish_in_background(settings, seeded)
        releaser = asyncio.create_task(
            release_late_trims(run.client, settings.task_queue("workflow"), late, stop)
        )
        deadline = time.monotonic() + stop_after if stop_after else math.inf
        complete = False
        while not complete and time.monotonic() < deadline:
            sample = await sampler.sample()
            complete = sample.closed >= len(expected) and sample.running == 0
            if not complete:
                await asyncio.sleep(min(sample_seconds, max(0.0, deadline - time.monotonic())))
        if not complete:
            print(f"  drain {phase} stopped after {stop_after:.0f} s, as asked: not every request decided")
        sampler.end()
        stop.set()
        await releaser
        published = join()
        publish_seconds = max(published.values()) - began
        for proc in procs:
            proc.sample()
        servers = stack_procs.cpu()
    finally:
        stop.set()
        for proc in procs:
            proc.stop()
    # Stopped early, the subscription still holds what was not decided: only a whole drain is counted.
    unacked = await asyncio.to_thread(count_redeliverable, settings) if complete else -1
    closed = [
        c
        for c in await closed_workflows(run.client, settings.task_queue("workflow"))
        if c.workflow_id in expected
    ]
    times = await fetch_delete_starts(run.client, [(c.workflow_id, c.run_id) for c in closed])
    return _result(
        run,
        seeded,
        times=times,
        complete=complete,
        replicas=replicas,
        began=began,
        publish_seconds=publish_seconds,
        closed=closed,
        unacked=unacked,
        procs=procs,
        servers=servers,
        sampler=sampler,
    )


def _result(
    run: Run,
    seeded: Seeded,
    *,
    replicas: int,
    began: float,
    publish_seconds: float,
    closed: list[Closed],
    unacked: int,
    procs: list[Proc],
    servers: dict[str, float],
    sampler: Sampler,
    times: dict[str, list[float]],
    complete: bool,
) -> DrainResult:
    expected = seeded.by_ledger()
    runs: dict[str, list[str]] = defaultdict(list)
    for c in closed:
        runs[c.workflow_id].append(c.outcome)
    seconds = max(c.close for c in closed) - began
    limits = {kind: float(run.extra_env.get(name, "0") or 0) for kind, name in LIMIT_SETTINGS.items()}
    outcomes = Counter(c.outcome for c in closed)
    return DrainResult(
        replicas=replicas,
        n=len(seeded.items),
        ledgers=len(runs),
        seconds=round(seconds, 1),
        rate=round(len(runs) / seconds, 2),
        steady_rate=round(steady_rate([c.close for c in closed]), 2),
        publish_seconds=round(publish_seconds, 1),
        outcomes=dict(outcomes),
        complete=complete,
        wrong=sum(not ledger_ok(item.outcome, runs[w]) for w, item in expected.items() if w in runs),
        missing=sum(1 for w in expected if w not in runs),
        dead_lettered=outcomes.get(Outcome.DEAD_LETTERED.value, 0),
        unacked=unacked,
        storage_problems=seeded.check_storage(run.cluster, sample=run.storage_sample)[:20]
        if complete
        else [],
        deletes={kind: len(t) for kind, t in times.items()},
        peak_rate={
            kind: {f"{w:.0f}s": round(peak_rate(t, w), 2) for w in PEAK_WINDOWS} for kind, t in times.items()
        },
        mean_delete_rate={kind: round(len(t) / seconds, 2) for kind, t in times.items()},
        limits=limits,
        server_limits=sampler.server_limits,
        rss_mb={name: {k: round(v, 1) for k, v in rss.items()} for name, rss in sampler.rss.items()},
        pools_cpu_s={p.name: round(p.cpu_s, 1) for p in procs},
        servers_cpu_s=servers,
        samples=sampler.samples,
    )
