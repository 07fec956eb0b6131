"""bench/benchmark.py --server-cpu: the Temporal server in a cgroup of its own with a CPU quota."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.phases import AResult
from bench.processes import CAP_PERIOD_US, SERVER_CGROUP, CpuCap, ServerPlacement
from bench.report import print_table


def _v1_root(tmp_path: Path) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    (tmp_path / "cpu" / "cgroup.procs").write_text("")
    return tmp_path


def test_v1_quota_is_the_fraction_of_each_short_period(tmp_path: Path) -> None:
    cap = CpuCap(0.6, root=_v1_root(tmp_path))

    cap.apply(4242)

    group = tmp_path / "cpu" / SERVER_CGROUP
    assert (group / "cpu.cfs_period_us").read_text() == str(CAP_PERIOD_US)
    assert (group / "cpu.cfs_quota_us").read_text() == str(int(0.6 * CAP_PERIOD_US))
    assert (group / "cgroup.procs").read_text() == "4242"
    cap.release(4242)
    assert (tmp_path / "cpu" / "cgroup.procs").read_text() == "4242"


def test_v2_writes_cpu_max(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    cap = CpuCap(1.5, root=tmp_path)

    cap.apply(7)

    assert (tmp_path / SERVER_CGROUP / "cpu.max").read_text() == f"{int(1.5 * CAP_PERIOD_US)} {CAP_PERIOD_US}"
    assert (tmp_path / SERVER_CGROUP / "cgroup.procs").read_text() == "7"


def test_no_cpu_controller_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")

    with pytest.raises(RuntimeError, match="--server-cpu needs the cgroup CPU controller"):
        CpuCap(0.5, root=tmp_path).apply(1)


def test_the_table_says_where_the_server_ran() -> None:
    report = {
        "n": 10,
        "run_id": "abc123",
        "load_before": "0.1",
        "load_after": "0.2",
        "replicas": "",
        "A": asdict(AResult(n=10, seconds=1.0, rate=10.0, steady_rate=10.0, events_happy=31.0)),
    }
    capped = ServerPlacement(cap=CpuCap(0.6)).describe()
    assert capped == "server capped at 0.6 of a core"
    assert capped in print_table({**report, "placement": capped}).splitlines()[0]
    # Reports written before the placement was recorded say whether the server was pinned.
    assert "server pinned to CPU 0" in print_table({**report, "pin_server": True}).splitlines()[0]


def _writable_cpu_controller() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        CpuCap(1.0)._group()
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(not _writable_cpu_controller(), reason="needs root and a cgroup CPU controller")
def test_a_real_process_lands_in_the_capped_group() -> None:
    cap = CpuCap(0.5)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        cap.apply(child.pid)
        membership = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert f"/{SERVER_CGROUP}" in membership
        cap.release(child.pid)
        assert f"/{SERVER_CGROUP}" not in Path(f"/proc/{child.pid}/cgroup").read_text()
        assert not cap._group().exists()
    finally:
        child.kill()
        child.wait()
