"""The benchmark's processes: /proc accounting (CPU seconds, peak RSS, load), the child processes it starts,
the stack's server processes and the benchmark stack's ports."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench import server_metrics
from devstack import ports
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
    """The stack's server processes, for their CPU per phase."""

    pids: dict[str, int]
    start: dict[str, float] = field(default_factory=dict)
    metrics_url: str | None = None  # --server-metrics: the Temporal server's Prometheus endpoint
    counted: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, stack: Stack) -> StackProcs:
        pids = {}
        for service in SERVICES:
            with contextlib.suppress(OSError, ValueError):
                pids[service] = int((stack.state_dir / "run" / f"{service}.pid").read_text())
        port = stack.ports.temporal_metrics
        metrics_url = f"http://{HOST}:{port}/metrics" if port else None
        return cls(pids, metrics_url=metrics_url)

    def mark(self) -> None:
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        if self.metrics_url:
            self.counted = server_metrics.scrape(self.metrics_url)

    def cpu(self) -> dict[str, float]:
        return {name: round(cpu_seconds(pid) - self.start.get(name, 0), 1) for name, pid in self.pids.items()}

    def work(self, items: int) -> dict[str, float]:
        """What the Temporal server counted since ``mark``, per item; empty without ``--server-metrics``.
        Call it once the phase's visibility writes, which trail the closes, have landed."""
        if not self.metrics_url:
            return {}
        return server_metrics.per_item(self.counted, server_metrics.scrape(self.metrics_url), items)


# --- the benchmark stack's ports --------------------------------------------------------------------------


def bench_ports(base: int = ports.BENCH, server_metrics: bool = False) -> StackPorts:
    """The benchmark stack's ports: the block at ``base`` (devstack.ports: 23233, 23650 …); with
    ``server_metrics``, the Temporal server's Prometheus endpoint on ``base`` + 235."""
    return ports.block(base, server_metrics)
