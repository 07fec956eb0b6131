"""``kill_switch.Watch``: what a deleting process's delete activities are told, from its reads of the switch.

The switch itself (a paused Temporal Schedule) is exercised on the stack in tests/operators/test_rollout.py.
"""

from __future__ import annotations

import asyncio

import pytest

from ledger_deletion.errors import ConfigurationError, DeletionPaused, PauseStateUnknown
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
    watch = Watch(Switch(False).read, every_seconds=0.01, stale_seconds=0.05)
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


async def test_a_view_is_as_old_as_its_read_started() -> None:
    """A read sent before a pause and answered after it says "off": dated by its answer, it would let deletes
    through for a whole stale bound after the pause, past the moment ``pause`` returns."""
    switch = Switch(False)

    async def slow() -> SwitchState:
        await asyncio.sleep(0.3)
        return await switch.read()

    watch = Watch(slow, every_seconds=0.1, stale_seconds=0.2)
    await watch.refresh()
    with pytest.raises(PauseStateUnknown, match="STALE_SECONDS=0.2"):
        await asyncio.to_thread(watch.check)
    assert (watch.age_seconds or 0) >= 0.3


async def test_an_answer_never_replaces_one_from_a_later_read() -> None:
    """The background read and a refusal's fresh read can overlap: the later-started one's state stands."""
    answers = {"early": SwitchState(False), "late": SwitchState(True, "paused by sre@host: test")}
    release_early = asyncio.Event()

    async def read_early() -> SwitchState:
        await release_early.wait()
        return answers["early"]

    async def read_late() -> SwitchState:
        return answers["late"]

    reads = iter([read_early, read_late])
    watch = Watch(lambda: next(reads)(), every_seconds=1, stale_seconds=30)
    early = asyncio.create_task(watch.refresh())
    await asyncio.sleep(0.01)  # the early read is sent
    await watch.refresh()  # the late one, answered first: paused
    release_early.set()
    assert (await early).paused is True  # the early answer reports the view it did not replace
    assert watch.paused is True


def test_a_look_period_as_long_as_the_stale_bound_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="KILL_SWITCH_SECONDS"):
        Watch(Switch(False).read, every_seconds=30, stale_seconds=30)
