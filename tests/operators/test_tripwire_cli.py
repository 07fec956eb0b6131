"""``ledger-deletion tripwire``: an operator sees the shared-BookKeeper tripwire's evidence and clears it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from devstack.stack import StackEndpoints
from ledger_deletion import tripwire
from ledger_deletion.cli import app

pytestmark = pytest.mark.stack


def test_the_tripwire_is_shown_with_its_evidence_and_cleared(
    stack: StackEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"ld-wire-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("TEMPORAL_ADDRESS", stack.temporal_address)
    monkeypatch.setenv("LEDGER_DELETION_TASK_QUEUE_PREFIX", prefix)
    wire = tripwire.tripwire_id(prefix)
    evidence = tripwire.Evidence("other/ns", 7, int(time.time() * 1000), "the watcher")

    async def trip_and_forget() -> None:
        client = await Client.connect(stack.temporal_address)
        await tripwire.trip(client, wire, evidence, "the test")

    async def delete() -> None:
        client = await Client.connect(stack.temporal_address)
        await client.get_schedule_handle(wire).delete()

    runner = CliRunner()
    never = runner.invoke(app, ["tripwire", "-o", "json"])
    assert never.exit_code == 0, never.output
    assert json.loads(never.output)["tripped"] is False
    asyncio.run(trip_and_forget())
    try:
        shown = runner.invoke(app, ["tripwire", "-o", "json"])
        assert shown.exit_code == 0, shown.output
        state = json.loads(shown.output)
        assert state["tripped"] and state["namespaces"] == ["other/ns"] and "ledger 7" in state["note"]
        table = runner.invoke(app, ["tripwire"])
        assert "TRIPPED" in table.output and "other/ns" in table.output
        cleared = runner.invoke(app, ["tripwire", "--clear", "-o", "json"])
        assert cleared.exit_code == 0, cleared.output
        assert json.loads(cleared.output)["tripped"] is False
    finally:
        asyncio.run(delete())
