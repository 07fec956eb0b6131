"""The demo's watcher step on the stack: each fact it prints holds; it leaves nothing running or written."""

from __future__ import annotations

import re
import threading
import uuid
from typing import Any

import pytest
from rich.console import Console
from temporalio.client import Client

from devstack.demo_watch import run_watch_step
from devstack.stack import StackEndpoints

pytestmark = pytest.mark.stack


async def test_the_watcher_requests_the_orphan_and_the_service_deletes_it(
    stack: StackEndpoints, temporal_client: Client, zk: Any, new_ledger_id: Any
) -> None:
    before = set(threading.enumerate())
    console = Console(record=True, width=200, color_system=None)
    ok = await run_watch_step(
        console,
        temporal_client,
        stack,
        stack.settings(),
        f"demo-test/watch-{uuid.uuid4().hex[:8]}",
        lambda n: [new_ledger_id() for _ in range(n)],
    )
    text = console.export_text()
    assert ok, text
    lines = text.splitlines()
    assert len(lines) == 7 and all(line.startswith("✓ ") for line in lines), text
    assert "source=watcher, watcher-reason=trimmed" in lines[2]
    assert "suspect GONE, 0 requests" in lines[3]
    assert lines[4].endswith(": DELETED")
    assert re.search(r"znode \S+ gone; \d+ \(listed\) kept$", lines[5]), lines[5]
    assert lines[6].startswith("✓ reconcile runs: 0")

    # Its chroot is removed, and of the threads it started none is left (asyncio's own executor stays).
    chroot = re.search(r"/(demo-watch-[0-9a-f]{8})", lines[0])
    assert chroot is not None and zk.exists(f"/{chroot.group(1)}") is None
    left = [t.name for t in set(threading.enumerate()) - before if not t.name.startswith("asyncio_")]
    assert left == []
