"""``ledger-deletion pause`` and ``resume``: the kill switch (``ledger_deletion.kill_switch``) from the CLI.

Pausing turns the switch on, then waits ``kill_switch_stale_seconds`` before it returns: by then every
deleting process has read the switch since it went on, or refuses to delete on its older view
(``PauseStateUnknown``), so no delete passes the switch after ``pause`` returns (docs/design.md, "The kill
switch"). Healthy processes see it sooner, within ``kill_switch_seconds``, but only the stale bound is
enforced whatever Temporal does. Checks keep running meanwhile. Resuming turns it off and signals every run
that waits on it (``DeletionStep="paused"``), so they delete at once instead of at their next backstop look.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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
    # pause: seconds waited after the switch read back as on (None: not waited, --no-wait or not on)
    waited_seconds: float | None = None
    stale_seconds: float = 0.0  # pause: the bound waited for, kill_switch_stale_seconds

    @property
    def holds(self) -> bool:
        """No delete passes the switch from now on (in every process whose stale bound is no larger)."""
        return (
            self.state.paused
            and self.waited_seconds is not None
            and self.waited_seconds >= self.stale_seconds
        )

    def as_json(self) -> dict[str, object]:
        return {
            "kill_switch": self.switch_id,
            "paused": self.state.paused,
            "note": self.state.note,
            "runs_signalled": self.waiting_runs,
            "signal_failures": self.signal_failures,
            "waited_seconds": None if self.waited_seconds is None else round(self.waited_seconds, 3),
            "deletes_held": self.holds,
        }


def waiting_query(settings: Settings) -> str:
    """The runs of this deployment waiting on the switch (the same text works in the Temporal UI)."""
    return visibility_query(running=True, step=Step.PAUSED.value, task_queue=settings.task_queue("workflow"))


async def state(client: Client, settings: Settings) -> SwitchReport:
    return SwitchReport(settings.kill_switch_id, await kill_switch.read(client, settings.kill_switch_id))


async def pause(
    client: Client,
    settings: Settings,
    reason: str,
    who: str,
    *,
    wait: bool = True,
    waiting: Callable[[float], None] = lambda seconds: None,
) -> SwitchReport:
    """Turn the switch on; with ``wait``, return only once no deleting process can pass it any more.

    ``kill_switch.pause`` returns the switch as read back after pausing. A Schedule's state is read through
    its scheduler workflow, whose queries are strongly consistent (answered after any signal it has taken),
    so once that read saw it on, every read started later sees it on; a process whose last read started
    earlier refuses once that read is ``kill_switch_stale_seconds`` old (``kill_switch.Watch.check``). Hence
    the wait, counted from here. ``waiting`` is told its length first (the CLI says so before it sleeps).
    """
    switched = await kill_switch.pause(client, settings.kill_switch_id, reason, who)
    seen_on = time.monotonic()
    bound = settings.kill_switch_stale_seconds
    if not wait or not switched.paused:  # not on: resumed meanwhile by someone else; nothing to wait for
        return SwitchReport(settings.kill_switch_id, switched, stale_seconds=bound)
    waiting(bound)
    await asyncio.sleep(bound)
    # asyncio's timer may fire a hair early by the monotonic clock: never return before the bound.
    while (waited := time.monotonic() - seen_on) < bound:
        await asyncio.sleep(bound - waited)
    return SwitchReport(settings.kill_switch_id, switched, waited_seconds=waited, stale_seconds=bound)


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
