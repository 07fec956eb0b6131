"""The benchmark end to end at a tiny N, on a stack of its own: the printed table has its count columns, and
the counts are the histories' own (events per message: the runs' history lengths, summed, over N).

Starts and stops a whole stack on ports 26xxx (apart from the default stack, the fault tests' 24xxx, the
soak's 25xxx and the stack tests' 27xxx), so it takes a minute or two.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from bench.mix import BK, DUPLICATE, IN_USE, LATE
from bench.processes import ROOT, bench_ports
from devstack import ports
from devstack.stack import Stack

pytestmark = pytest.mark.stack

PORT_BASE = ports.BENCH_TEST
N = 46  # two whole topics that exist: every shape of a live topic twice


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str]]:
    state_dir = tmp_path_factory.mktemp("bench-stack")
    out = tmp_path_factory.mktemp("bench-out")
    argv = [
        sys.executable,
        str(ROOT / "bench" / "benchmark.py"),
        *("--n", str(N), "--quick", "--skip-faults", "--keep-stack"),
        *("--port-base", str(PORT_BASE), "--state-dir", str(state_dir), "--out", str(out)),
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"results in {out}" in done.stdout
        yield json.loads((out / "report.json").read_text()), done.stdout
    finally:
        Stack(state_dir, bench_ports(PORT_BASE)).down()


def test_the_table_leads_with_the_counts_per_shape(run: tuple[dict[str, Any], str]) -> None:
    report, printed = run
    table = report["table"]
    assert table in printed
    header = next(line for line in table.splitlines() if line.startswith("shape (per ledger)")).split()
    for column in ("events", "tasks", "markers", "actions", "KB", "typical", "deliv"):
        assert column in header
    rows = {line[:40].rstrip() for line in table.splitlines()}
    assert {BK, LATE, DUPLICATE, IN_USE, "all, per message"} <= rows
    assert "CPU ms per message, from /proc" in table
    for process in ("workflow pool", "Temporal server", "ZooKeeper", "B: PIP-186 consumer", "total"):
        assert f"  {process} " in table


def test_every_request_ended_as_it_must(run: tuple[dict[str, Any], str]) -> None:
    report, _ = run
    a, b = report["A"], report["B"]
    assert (a["n"], a["wrong"], a["missing"], a["unacked"], a["storage_problems"]) == (N, 0, 0, 0, [])
    assert (b["n"], b["wrong"], b["storage_problems"]) == (N, 0, [])
    # The late requests were released while the deleter waited out its grace, then deleted.
    assert a["late_released"] == b["late_released"] == a["shapes"][LATE]["ledgers"] == 2
    assert a["shapes"][LATE]["counts"]["timers"] >= 2


async def test_the_counts_are_the_histories_own(run: tuple[dict[str, Any], str]) -> None:
    report, _ = run
    a = report["A"]
    client = await Client.connect(report["temporal_address"])
    query = f'TaskQueue = "{report["task_queues"]["a"]}"'
    listed = [wf async for wf in client.list_workflows(query)]
    events = sum(wf.history_length for wf in listed)

    assert a["totals"]["runs"] == len(listed)
    assert a["totals"]["events"] == events
    assert sum(shape["counts"]["events"] for shape in a["shapes"].values()) == events
    summary = report["table"].splitlines()[-1]
    assert summary.startswith(f"events_per_message={events / N:.2f} ")
    all_row = next(line for line in report["table"].splitlines() if line.startswith("all, per message"))
    ledgers = sum(shape["ledgers"] for shape in a["shapes"].values())
    assert all_row[40:].split()[:3] == [str(ledgers), str(N), f"{events / N:.1f}"]
