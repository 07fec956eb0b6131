"""The kill switch: one durable flag that stops every delete of a deployment, cluster-wide, within seconds.

The flag is the paused state of a Temporal Schedule, ``<task queue prefix>-kill-switch``, that starts nothing
(no calendar, no interval). Temporal keeps it, so it survives any restart of ours; every process of the
deployment reads the same one; it carries a note (who paused, when, why); and an operator can flip it without
this CLI, from the Temporal UI's Schedules page (Pause / Unpause) or with ``temporal schedule toggle``.

Each deleting process (the bookkeeper and offload pools) reads it every ``kill_switch_seconds`` in the
background (:class:`Watch`), and each delete activity asks the watch before it changes anything: paused, it
raises :class:`DeletionPaused`, which the workflow waits out, visibly (``DeletionStep=paused``); read too long
ago (Temporal out of reach), it raises :class:`PauseStateUnknown`, retried, so a process cut off from
Temporal cannot miss a pause. A run that is not paused pays nothing: no event, no call in its path.

"Too long ago" is counted from when the read *started* (``kill_switch_stale_seconds``), which is what lets
``ledger-deletion pause`` promise something: once the switch reads back as on, a read started later sees it
on, and a view from a read started earlier is refused once ``kill_switch_stale_seconds`` have passed; so
after that long, no delete passes :meth:`Watch.check` in any deleting process with that bound or a smaller
one (``ledger_deletion.ops.pause`` waits it).

Why a Schedule rather than a task-queue rate limit or Temporal's activity pause: docs/design.md, "The kill
switch".
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion.errors import ConfigurationError, DeletionPaused, PauseStateUnknown

log = logging.getLogger(__name__)

# What the schedule would start if someone pressed "Trigger" on it: a workflow type no worker runs, which
# times out unstarted a moment later. The schedule has no calendar, so nothing else ever starts it.
_NEVER_STARTED = "LedgerDeletionKillSwitch"
_S = TypeVar("_S")
_T = TypeVar("_T")


@dataclass(frozen=True)
class SwitchState:
    paused: bool
    note: str = ""  # who paused or resumed, when, why

    def describe(self) -> str:
        state = "PAUSED: deletes are refused" if self.paused else "not paused: deletes run"
        return f"{state}" + (f" ({self.note})" if self.note else "")


def operator() -> str:
    """Who flips the switch, as the note names them: ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def note(verb: str, who: str, reason: str = "") -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{verb} by {who} at {when}" + (f": {reason}" if reason else "")


async def read(client: Client, switch_id: str) -> SwitchState:
    """The switch as Temporal has it now; never created means never paused."""
    try:
        description = await client.get_schedule_handle(switch_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return SwitchState(False)
        raise
    state = description.schedule.state
    return SwitchState(state.paused, state.note or "")


async def pause(client: Client, switch_id: str, reason: str, who: str) -> SwitchState:
    """Turn the switch on (creating it the first time); returns the state now."""
    text = note("paused", who, reason)
    try:
        await client.create_schedule(switch_id, _schedule(switch_id, paused=True, text=text))
    except ScheduleAlreadyRunningError:
        await client.get_schedule_handle(switch_id).pause(note=text)
    return await read(client, switch_id)


async def ensure(client: Client, switch_id: str, who: str) -> None:
    """Create the switch, off, unless it exists: a deleting process does at start, so that the switch is on
    the Temporal UI's Schedules page (and ``temporal schedule toggle`` finds it) before anyone has paused."""
    with contextlib.suppress(ScheduleAlreadyRunningError):
        await client.create_schedule(switch_id, _schedule(switch_id, paused=False, text=note("created", who)))


async def resume(client: Client, switch_id: str, who: str) -> SwitchState:
    """Turn the switch off (nothing to do when it was never created)."""
    handle: ScheduleHandle = client.get_schedule_handle(switch_id)
    try:
        await handle.unpause(note=note("resumed", who))
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
    return await read(client, switch_id)


def _schedule(switch_id: str, *, paused: bool, text: str) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            _NEVER_STARTED,
            id=f"{switch_id}-never-run",
            task_queue=f"{switch_id}-none",
            execution_timeout=timedelta(seconds=1),
        ),
        spec=ScheduleSpec(),
        state=ScheduleState(paused=paused, note=text),
    )


class FlagView(Generic[_S]):
    """A Schedule-held flag (the kill switch, the shared-BookKeeper tripwire) as this process read it lately:
    read every ``every_seconds`` in the background, asked from activity threads, too old after
    ``stale_seconds``.

    A view is as old as the read that found it *started*, not as its answer: a read sent before a pause and
    answered after it reports the switch off, and dated by its answer it would let deletes run for another
    ``stale_seconds`` counted from after the pause, past the moment ``ledger-deletion pause`` promises. For
    the same reason an answer never replaces one from a read that started later (the background read and an
    activity's fresh read can overlap).
    """

    def __init__(
        self,
        read_flag: Callable[[], Awaitable[_S]],
        every_seconds: float,
        stale_seconds: float,
        changed: Callable[[_S | None, _S], None],
    ) -> None:
        if every_seconds >= stale_seconds:
            # Every view would go stale before the next look: deletes refused for part of every period.
            raise ConfigurationError(
                f"LEDGER_DELETION_KILL_SWITCH_SECONDS ({every_seconds:g}) must be less than "
                f"LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS ({stale_seconds:g})"
            )
        self._read = read_flag
        self.every_seconds = every_seconds
        self.stale_seconds = stale_seconds
        self._changed = changed
        # (state, when the read that found it started): replaced whole, never mutated, since activity threads
        # read it while the event loop writes it.
        self._last: tuple[_S, float] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one refresh() runs on

    @property
    def state(self) -> _S | None:
        """As last read, however long ago; None before the first read."""
        return None if self._last is None else self._last[0]

    @property
    def age_seconds(self) -> float | None:
        """Since the last read that counts started; None before the first."""
        return None if self._last is None else time.monotonic() - self._last[1]

    def fresh(self) -> _S | None:
        """As last read, if that read started within ``stale_seconds``; else None."""
        last = self._last
        if last is None or time.monotonic() - last[1] > self.stale_seconds:
            return None
        return last[0]

    def record(self, state: _S) -> None:
        """A state this process has just written (and read back): as fresh as a read started now."""
        self._last = (state, time.monotonic())

    def on_loop(self, call: Callable[[], Coroutine[Any, Any, _T]], timeout: float) -> _T:
        """``call()`` run on the loop that refreshes the view, from an activity thread; its result.

        Raises:
            RuntimeError: no loop refreshes the view, or this is that loop (blocking on it would deadlock).
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("it is not being watched")
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                raise RuntimeError("called on the loop that watches it")
        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=timeout)

    async def refresh(self) -> _S:
        """Read the flag; the view it leaves is as old as the read's start."""
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        state = await self._read()
        last = self._last
        if last is not None and last[1] > started:
            return last[0]
        self._last = (state, started)
        self._changed(None if last is None else last[0], state)
        return state

    async def run(self, stop: asyncio.Event, what: str) -> None:
        """Read the flag every ``every_seconds`` until ``stop``; a failed read keeps the last state, which
        goes stale if reads keep failing."""
        await poll(self.refresh, self.every_seconds, stop, what)


class Watch:
    """A deleting process's view of the switch, refreshed in the background; asked by each delete."""

    def __init__(
        self, read_switch: Callable[[], Awaitable[SwitchState]], every_seconds: float, stale_seconds: float
    ) -> None:
        self._view = FlagView(read_switch, every_seconds, stale_seconds, _log_switch_change)

    def check(self) -> None:
        """Raise unless deletes may run now (called by each delete activity, from its thread).

        A delete is refused only on a fresh read: ``ledger-deletion resume`` signals the waiting runs right
        after it turns the switch off, and a run that came back before this process's next look would
        otherwise be refused again and wait for its backstop. Only refused deletes read it (one call each).
        """
        state = self._view.fresh()
        if state is None:
            age = self._view.age_seconds
            seen = "never" if age is None else f"{age:.0f} s ago"
            raise PauseStateUnknown(
                f"the kill switch was last read {seen} (bound: LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS="
                f"{self._view.stale_seconds:g}): nothing is deleted until it is read again"
            )
        if state.paused:
            state = self._read_now() or state
            if state.paused:
                raise DeletionPaused(state.note or "paused")

    def _read_now(self) -> SwitchState | None:
        """The switch read now, from an activity thread on the watch's loop; None when it cannot be."""
        try:
            return self._view.on_loop(self._view.refresh, timeout=self._view.every_seconds + 5)
        except Exception as exc:  # unreadable now: the last read stands (paused)
            log.warning("kill switch unreadable: %s: %s", type(exc).__name__, exc)
            return None

    @property
    def paused(self) -> bool | None:
        """As last read; None before the first read."""
        state = self._view.state
        return None if state is None else state.paused

    @property
    def age_seconds(self) -> float | None:
        """Since the last read that counts started; None before the first."""
        return self._view.age_seconds

    async def refresh(self) -> SwitchState:
        """Read the switch now (see :class:`FlagView` for how old the view it leaves is)."""
        return await self._view.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Read the switch every ``every_seconds`` until ``stop``; a failed read keeps the last state, which
        goes stale (and deletes stop) if reads keep failing."""
        await self._view.run(stop, "kill switch")


def _log_switch_change(was: SwitchState | None, now: SwitchState) -> None:
    if was is not None and was.paused != now.paused or was is None and now.paused:
        log.warning("kill switch: %s", now.describe())


async def poll(
    refresh: Callable[[], Awaitable[object]], every_seconds: float, stop: asyncio.Event, what: str
) -> None:
    """Call ``refresh`` every ``every_seconds`` until ``stop``: the background read of a Schedule-held flag
    (the kill switch, the shared-BookKeeper tripwire). A failed read is logged and retried on the next tick;
    the view it leaves goes stale, which its users treat as unknown."""
    while not stop.is_set():
        try:
            await refresh()
        except Exception as exc:  # Temporal out of reach: retried on the next tick
            log.warning("%s unreadable: %s: %s", what, type(exc).__name__, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_seconds)
