"""``ledger-deletion pause`` and ``resume``: the kill switch (``ledger_deletion.kill_switch``) from the CLI.

Pausing turns the switch on; every deleting process sees it within ``kill_switch_seconds`` and refuses each
delete from then on, while the checks keep running. Resuming turns it off and signals every run that waits
on it (``DeletionStep="paused"``), so they delete at once instead of at their next backstop look.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.service import RPCError

from ledger_deletion import kill_switch
from ledger_deletion.contracts import Step
from ledger_deletion.ops.deletions import visibility_query
from ledger_deletion.settings import Settings
from workflows.ledger_deletion import RESUME_SIGNAL

SIGNALS_AT_ONCE = 32


@dataclass(frozen=True)
class SwitchReport:
    switch_id: str
    state: kill_switch.SwitchState
    waiting_runs: int = 0  # runs found waiting on the switch (pause: 0; resume: those signalled)
    signal_failures: int = 0  # runs that could not be signalled (they resume at their backstop look)

    def as_json(self) -> dict[str, object]:
        return {
            "kill_switch": self.switch_id,
            "paused": self.state.paused,
            "note": self.state.note,
            "runs_signalled": self.waiting_runs,
            "signal_failures": self.signal_failures,
        }


def waiting_query(settings: Settings) -> str:
    """The runs of this deployment waiting on the switch (the same text works in the Temporal UI)."""
    return visibility_query(running=True, step=Step.PAUSED.value, task_queue=settings.task_queue("workflow"))


async def state(client: Client, settings: Settings) -> SwitchReport:
    return SwitchReport(settings.kill_switch_id, await kill_switch.read(client, settings.kill_switch_id))


async def pause(client: Client, settings: Settings, reason: str, who: str) -> SwitchReport:
    switched = await kill_switch.pause(client, settings.kill_switch_id, reason, who)
    return SwitchReport(settings.kill_switch_id, switched)


async def resume(client: Client, settings: Settings, who: str) -> SwitchReport:
    switched = await kill_switch.resume(client, settings.kill_switch_id, who)
    ids = [execution.id async for execution in client.list_workflows(waiting_query(settings))]
    slots = asyncio.Semaphore(SIGNALS_AT_ONCE)

    async def signal(workflow_id: str) -> bool:
        async with slots:
            try:
                await client.get_workflow_handle(workflow_id).signal(RESUME_SIGNAL)
            except RPCError:  # closed meanwhile, or not reachable: its backstop look resumes it
                return False
            return True

    sent = await asyncio.gather(*(signal(i) for i in dict.fromkeys(ids)))
    return SwitchReport(settings.kill_switch_id, switched, sum(sent), len(sent) - sum(sent))
