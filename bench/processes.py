"""The benchmark's processes: /proc accounting (CPU seconds, peak RSS, load), the child processes it starts,
the stack's server processes, the stack's ports, and where the Temporal server runs (pinned to a core or
capped at a fraction of one, restarted on an empty database)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench import server_metrics, server_profile
from devstack.faults import ServiceControl
from devstack.stack import HOST, SERVICES, Stack, StackPorts

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


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


def usage(procs: list[Proc]) -> dict[str, dict[str, float]]:
    """CPU seconds and peak RSS of each process, as the report keeps them."""
    return {p.name: {"cpu_s": round(p.cpu_s, 1), "rss_mb": round(p.rss_mb)} for p in procs}


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
    metrics_url: str | None = None  # --server-metrics: the Temporal server's Prometheus endpoint
    counted: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, stack: Stack, profile_dir: Path | None = None) -> StackProcs:
        pids = {}
        for service in SERVICES:
            with contextlib.suppress(OSError, ValueError):
                pids[service] = int((stack.state_dir / "run" / f"{service}.pid").read_text())
        port = stack.ports.temporal_metrics
        metrics_url = f"http://{HOST}:{port}/metrics" if port else None
        return cls(pids, profile_dir=profile_dir, metrics_url=metrics_url)

    def mark(self, phase: str) -> None:
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        if self.metrics_url:
            self.counted = server_metrics.scrape(self.metrics_url)
        if self.profile_dir is not None and "temporal" in self.pids:
            self.recording = server_profile.record(self.pids["temporal"], self.profile_dir / f"{phase}.data")

    def cpu(self) -> dict[str, float]:
        if self.recording is not None:
            server_profile.stop(self.recording)
            self.recording = None
        return {name: round(cpu_seconds(pid) - self.start.get(name, 0), 1) for name, pid in self.pids.items()}

    def work(self, items: int) -> dict[str, float]:
        """What the Temporal server counted since ``mark``, per item; empty without ``--server-metrics``.
        Call it once the phase's visibility writes, which trail the closes, have landed."""
        if not self.metrics_url:
            return {}
        return server_metrics.per_item(self.counted, server_metrics.scrape(self.metrics_url), items)


# --- the benchmark stack: its ports, the Temporal server's placement -------------------------------------


def bench_ports(base: int = 23000, server_metrics: bool = False) -> StackPorts:
    """The benchmark stack's ports: ``base`` + the default ports' last three digits (23233, 23650 …); with
    ``server_metrics``, the Temporal server's Prometheus endpoint on ``base`` + 235."""
    return StackPorts(
        temporal=base + 233,
        temporal_ui=base + 234,
        pulsar=base + 650,
        zookeeper=base + 181,
        s3=base + 900,
        admin=base + 80,
        admin_owner=base + 81,
        temporal_metrics=base + 235 if server_metrics else 0,
    )


def pin_server(stack: Stack) -> None:
    """The Temporal server alone on CPU 0: A and C are then bound by what one core of server can orchestrate,
    as when the server has a machine of its own (everything else this run starts inherits CPU 1)."""
    server = stack.pid("temporal")
    assert server is not None, "--pin-server needs the stack started by this run (no --keep-state)"
    for task in Path(f"/proc/{server}/task").iterdir():
        os.sched_setaffinity(int(task.name), {0})


CGROUP_ROOT = Path("/sys/fs/cgroup")
SERVER_CGROUP = "ld-bench-temporal"
# Short periods: the capped server is throttled in slices of at most this much, not for 100 ms at a time
# (the kernel's default period), which would stall workflow tasks long enough to time some out.
CAP_PERIOD_US = 20_000


@dataclass(frozen=True)
class CpuCap:
    """A cgroup of its own for the Temporal server with a CPU quota of ``fraction`` of one core.

    Capped (and not pinned), the server is the only bottleneck, as in a deployment where it runs on machines
    of its own, while the pools and the stand-ins for the Pulsar cluster share the rest of this machine and
    have CPU to spare. Needs root and the cgroup CPU controller: v1 (``/sys/fs/cgroup/cpu``) or v2
    (``cpu`` in ``cgroup.controllers``).
    """

    fraction: float
    root: Path = CGROUP_ROOT

    def apply(self, pid: int) -> None:
        group = self._group()
        group.mkdir(exist_ok=True)
        quota = round(self.fraction * CAP_PERIOD_US)
        if self._v1():
            (group / "cpu.cfs_period_us").write_text(str(CAP_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (group / "cpu.max").write_text(f"{quota} {CAP_PERIOD_US}")
        (group / "cgroup.procs").write_text(str(pid))  # the whole process: every thread, and any it starts

    def release(self, pid: int) -> None:
        """Back to the root group, uncapped (the stack keeps running after the benchmark); the empty group
        is removed."""
        group = self._group()
        with contextlib.suppress(OSError):
            (group.parent / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):  # still in use (another benchmark's server), or not a cgroupfs
            group.rmdir()

    def _v1(self) -> bool:
        return (self.root / "cpu" / "cpu.cfs_quota_us").exists()

    def _group(self) -> Path:
        if self._v1():
            return self.root / "cpu" / SERVER_CGROUP
        controllers = self.root / "cgroup.controllers"
        if not controllers.exists() or "cpu" not in controllers.read_text().split():
            raise RuntimeError(
                f"--server-cpu needs the cgroup CPU controller: neither {self.root / 'cpu'} (v1) nor "
                f"'cpu' in {controllers} (v2)"
            )
        return self.root / SERVER_CGROUP


@dataclass(frozen=True)
class ServerPlacement:
    """Where the benchmark's Temporal server runs; applied again after every restart on an empty database."""

    pinned: bool = False
    cap: CpuCap | None = None

    def apply(self, stack: Stack) -> None:
        if self.pinned:
            pin_server(stack)
        if self.cap is not None:
            server = stack.pid("temporal")
            assert server is not None, "--server-cpu needs the stack started by this run (no --keep-state)"
            self.cap.apply(server)

    def release(self, stack: Stack) -> None:
        server = stack.pid("temporal")
        if self.cap is not None and server is not None:
            self.cap.release(server)

    def describe(self) -> str:
        if self.cap is not None:
            return f"server capped at {self.cap.fraction:g} of a core"
        return "server pinned to CPU 0" if self.pinned else ""


def restart_temporal_empty(stack: Stack) -> None:
    """Stop the Temporal server, delete its database and start it again."""
    ServiceControl(stack).stop("temporal")
    for path in (stack.state_dir / "data").glob("temporal.db*"):
        path.unlink()
    ServiceControl(stack).start()
