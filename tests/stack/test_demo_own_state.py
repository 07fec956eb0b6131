"""The demo runs on state of its own: what other runs leave on the shared stack neither meets its ledgers
nor passes for its runs.

A soak (or a test session, or a benchmark) leaves ledgers in the stack's ZooKeeper and closed deletion runs
in its one Temporal namespace, and not every writer takes its ledger ids from the stack's id generator.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy

from devstack.cluster import SimulatedCluster
from devstack.demo_state import LONG_ID_BASE, fresh_ledger_ids
from devstack.stack import StackEndpoints
from ledger_deletion.contracts import Mode
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.rollout import workflow_id

pytestmark = pytest.mark.stack

# More ids than the demo takes (19 for its scenario, a few for the watcher's step), so that the ids other
# sessions on the shared stack take meanwhile do not carry the demo past the planted ones.
PLANTED = 80
# A row of the demo's table of ledgers: "│ <ledger id> │ BookKeeper │ ..." (or S3).
LEDGER_ROW = re.compile(r"^│ (\d+) +│ (?:BookKeeper|S3) ", re.MULTILINE)


def _data(zk: Any, path: str) -> bytes | None:
    try:
        data: bytes = zk.get(path)[0]
    except NoNodeError:
        return None
    return data


async def test_the_demo_writes_over_no_ledger_another_cluster_left_at_its_ids(
    stack: StackEndpoints, zk: Any
) -> None:
    root = SimulatedCluster(zk, stack.s3_client(), bucket=stack.offload_bucket)
    (last,) = root.new_ledger_ids(1)
    ids = range(last + 1, last + 1 + PLANTED)
    tenant = f"soak-{uuid.uuid4().hex[:8]}"
    # Another cluster's topic, listing its ledgers at the ids the stack's id generator hands out next: what
    # a writer that does not take its ids from there leaves (the soak did), in use and nobody's to
    # delete.
    root.create_topic(f"{tenant}/r1/orders", ids)
    paths = {i: ledger_path(i, root.ledgers_root) for i in ids}
    planted = {i: _data(zk, path) for i, path in paths.items()}
    try:
        command = shutil.which("ledger-deletion", path=str(Path(sys.executable).parent))
        assert command is not None
        env = {**os.environ, "COLUMNS": "220"}  # one table row a line
        done = await asyncio.to_thread(
            subprocess.run, [command, "demo"], capture_output=True, text=True, env=env, timeout=300
        )
        out = done.stdout
        assert done.returncode == 0, out + done.stderr
        assert out.rstrip().endswith("demo passed")
        used = {int(i) for i in LEDGER_ROW.findall(out)}
        met = used & planted.keys()
        # The demo took ids where the other cluster's ledgers are (else this test shows nothing) ...
        assert met, (sorted(used), last)
        # ... and left every one of those ledgers as it was: its own are in a ZooKeeper chroot of its own.
        # (Only the ids the demo took: it took them from the id generator, so no other session has them.)
        assert {i: _data(zk, paths[i]) for i in met} == {i: planted[i] for i in met}
        assert tenant not in out
    finally:
        root.delete_topic(f"{tenant}/r1/orders")
        for i, path in paths.items():
            if _data(zk, path) == planted[i]:  # one another session took and rewrote is its own now
                zk.delete(path)


async def test_the_demo_takes_no_ledger_id_an_earlier_run_is_keyed_by(temporal_client: Client) -> None:
    """A closed run of ``ledger-deletion/LEDGER/<id>`` (live or shadow, or of the long id the scenario
    derives) would be read as the demo's own result for that id: such ids are passed over."""
    base = 10**12 + uuid.uuid4().int % 10**9  # far from every allocator on the stack
    live, shadow, free = base, base + 1, base + 2

    def key(ledger_id: int, mode: Mode) -> str:
        request = PendingDeleteLedgerInfo(
            "soak/r1/orders", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id
        )
        return workflow_id(request, mode)

    earlier = [key(live, Mode.LIVE), key(LONG_ID_BASE + shadow, Mode.SHADOW)]
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    for run in earlier:
        handle = await temporal_client.start_workflow(
            "EarlierRun", id=run, task_queue=queue, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE
        )
        await handle.terminate("a run an earlier session left")
    offered = iter([live, shadow, free, base + 3])

    def allocate(count: int) -> list[int]:
        return [next(offered) for _ in range(count)]

    ids = await fresh_ledger_ids(temporal_client, allocate, 2)
    assert ids(2) == [free, base + 3]
