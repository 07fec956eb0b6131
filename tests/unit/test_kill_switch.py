"""``kill_switch.Watch``: what a deleting process's delete activities are told, from its reads of the switch.

The switch itself (a paused Temporal Schedule) is exercised on the stack in tests/operators/test_rollout.py.
"""

from __future__ import annotations

import asyncio

import pytest

from ledger_deletion.errors import DeletionPaused, PauseStateUnknown
from ledger_deletion.kill_switch import SwitchState, Watch


class Switch:
    def __init__(self, paused: bool) -> None:
        self.state = SwitchState(paused, "paused by sre@host: test" if paused else "")
        self.reads = 0

    async def read(self) -> SwitchState:
        self.reads += 1
        return self.state


async def test_deletes_wait_until_the_switch_was_read() -> None:
    watch = Watch(Switch(False).read, every_seconds=1, stale_seconds=30)
    with pytest.raises(PauseStateUnknown):
        await asyncio.to_thread(watch.check)
    await watch.refresh()
    await asyncio.to_thread(watch.check)  # off: no raise


async def test_a_stale_read_stops_deletes() -> None:
    watch = Watch(Switch(False).read, every_seconds=1, stale_seconds=0.05)
    await watch.refresh()
    await asyncio.sleep(0.1)
    with pytest.raises(PauseStateUnknown, match="last read"):
        await asyncio.to_thread(watch.check)


async def test_a_paused_switch_refuses_with_its_note() -> None:
    switch = Switch(True)
    watch = Watch(switch.read, every_seconds=1, stale_seconds=30)
    await watch.refresh()
    with pytest.raises(DeletionPaused, match="sre@host"):
        await asyncio.to_thread(watch.check)
    assert watch.paused is True


async def test_a_refusal_reads_the_switch_again_first() -> None:
    """Resumed between two looks: the run signalled by ``resume`` is not refused on the stale read."""
    switch = Switch(True)
    watch = Watch(switch.read, every_seconds=60, stale_seconds=120)
    await watch.refresh()
    switch.state = SwitchState(False, "resumed")
    await asyncio.to_thread(watch.check)  # no raise: read afresh from the activity's thread
    assert switch.reads == 2 and watch.paused is False
