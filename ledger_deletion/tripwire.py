"""The shared-BookKeeper tripwire: with ``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none``, proof that the
operator's "this Pulsar cluster alone uses this BookKeeper" is wrong stops every delete it would make unsafe.

The proof: a ledger tagged with a namespace this cluster does not have
(``PulsarMetadataStore.knows_namespace``), created within :data:`WINDOW`. A live Pulsar cluster keeps creating
ledgers in a namespace it uses: every topic rolls its ledger over at least every
``managedLedgerMaxLedgerRolloverTimeMinutes`` (240 by default) once written to, a cursor ledger every
``managedLedgerCursorRolloverTimeInSeconds`` (14400) once acked, and every topic load (restart, unload, bundle
split) opens a new ledger (``ManagedLedgerImpl.initialize`` -> ``createLedgerAfterClosed``). A namespace this
cluster deleted stops: its deletion (``NamespacesBase.internalDeleteNamespace``) first deletes or refuses
every topic, so no broker of ours writes there again. So a recent ledger of a namespace we do not have is
another writer's; an old one may be an orphan a namespace deletion left half-way, which may still be deleted
while nothing has tripped. The window is the 4-hour rollover plus 2 hours for a request to reach a decision
(the watcher's delay, reconcile's scan, queues): 6 hours. It only spot-checks ``none``: another cluster using
a namespace name this one also has (two clusters' ``public/default``) is never caught; only listing its store
protects those. A namespace this cluster deleted within the window whose orphans are requested trips it too:
an operator checks and clears.

Tripped, it stays tripped (durable) until an operator clears it: ``ledger-deletion tripwire clear``. The flag
is the paused state of a second Temporal Schedule, ``<task queue prefix>-shared-bookkeeper-tripwire``, kept by
:mod:`ledger_deletion.kill_switch`'s functions: every deleting process reads it, its note names the evidence,
and the Temporal UI shows it. While tripped, no ledger of an unknown namespace is deleted (the workflow's
``SKIPPED_UNKNOWN_NAMESPACE``) or requested (the watcher, reconcile). The workflow pool, the watcher and
reconcile all trip it with :func:`trip` when they see evidence (:func:`is_evidence`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.client import Client

from ledger_deletion import kill_switch
from ledger_deletion.errors import TripwireStateUnknown
from ledger_deletion.observability import metrics

log = logging.getLogger(__name__)

WINDOW = timedelta(hours=6)
SUFFIX = "shared-bookkeeper-tripwire"
_EVIDENCE = re.compile(r"namespace (\S+) \(ledger ")


def tripwire_id(task_queue_prefix: str) -> str:
    """The Temporal Schedule whose paused state is the tripwire of the deployment with this prefix."""
    return f"{task_queue_prefix}-{SUFFIX}"


def is_evidence(created_ms: float, now_s: float) -> bool:
    """Is a ledger of a namespace this cluster does not know, created at ``created_ms`` (BookKeeper's ctime,
    ms since the epoch), recent enough at ``now_s`` (seconds since the epoch) to be another writer's? A ctime
    in the future (clock skew) is recent."""
    return now_s * 1000 - created_ms < WINDOW.total_seconds() * 1000


@dataclass(frozen=True)
class Evidence:
    """A ledger that proves another writer: its namespace, id and creation time, and who saw it."""

    namespace: str
    ledger_id: int
    created_ms: int
    seen_by: str

    def describe(self) -> str:
        created = datetime.fromtimestamp(self.created_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (
            f"namespace {self.namespace} (ledger {self.ledger_id} created {created}, seen by {self.seen_by})"
        )


@dataclass(frozen=True)
class TripState:
    tripped: bool
    note: str = ""  # who tripped or cleared it, when, and the evidence

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces the evidence names (none when an operator tripped it by hand)."""
        return tuple(dict.fromkeys(_EVIDENCE.findall(self.note))) if self.tripped else ()

    def describe(self) -> str:
        state = "TRIPPED: no ledger of an unknown namespace is deleted" if self.tripped else "not tripped"
        return state + (f" ({self.note})" if self.note else "")


async def read(client: Client, tripwire: str) -> TripState:
    """The tripwire as Temporal has it now; never created means never tripped."""
    state = await kill_switch.read(client, tripwire)
    return TripState(state.paused, state.note)


async def trip(client: Client, tripwire: str, evidence: Evidence, who: str) -> TripState:
    """Trip it (idempotent), adding the evidence's namespace to its note; logs one line per namespace."""
    metrics.current().shared_bookkeeper_evidence(evidence.namespace)
    current = await read(client, tripwire)
    if evidence.namespace in current.namespaces:
        return current
    earlier = (
        [m.group(0) for m in re.finditer(r"namespace \S+ \([^)]*\)", current.note)] if current.tripped else []
    )
    reason = "another writer shares this BookKeeper: " + "; ".join([*earlier, evidence.describe()])
    await kill_switch.pause(client, tripwire, reason, who)
    log.error(
        "shared BookKeeper tripwire %s tripped by %s: LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none is wrong, "
        "no ledger of a namespace this cluster does not have is deleted until it is cleared "
        "(docs/deployment.md#shared-bookkeeper)",
        tripwire,
        evidence.describe(),
    )
    return await read(client, tripwire)


async def clear(client: Client, tripwire: str, who: str) -> TripState:
    """Clear it, once an operator has listed the other cluster's store or checked the evidence."""
    state = await kill_switch.resume(client, tripwire, who)
    return TripState(state.paused, state.note)


class View:
    """A process's view of the tripwire, refreshed in the background like the kill switch
    (``kill_switch_seconds``; too old after ``kill_switch_stale_seconds``: ``kill_switch.FlagView``);
    asked and tripped from activity threads."""

    def __init__(
        self, client: Client, tripwire: str, who: str, every_seconds: float, stale_seconds: float
    ) -> None:
        self._client = client
        self._id = tripwire
        self._who = who
        self._view = kill_switch.FlagView(
            functools.partial(read, client, tripwire), every_seconds, stale_seconds, self._log_change
        )
        # One trip per namespace from this process, however many of its ledgers are checked at once.
        self._reporting = threading.Lock()

    @property
    def state(self) -> TripState | None:
        """As last read; None before the first read."""
        return self._view.state

    def current(self) -> TripState:
        """The tripwire as read lately (from an activity thread).

        Raises:
            TripwireStateUnknown: not read within ``stale_seconds``.
        """
        state = self._view.fresh()
        if state is None:
            raise TripwireStateUnknown(
                f"the shared-BookKeeper tripwire {self._id} was not read in the last "
                f"{self._view.stale_seconds:g} s: a ledger of a namespace this cluster does not have waits "
                "until it is"
            )
        return state

    def report(self, evidence: Evidence) -> TripState:
        """Trip it durably for ``evidence`` (from an activity thread), before anything relies on it.

        Raises:
            TripwireStateUnknown: the trip could not be recorded (Temporal out of reach).
        """
        with self._reporting:
            last = self._view.state
            if last is not None and evidence.namespace in last.namespaces:
                metrics.current().shared_bookkeeper_evidence(evidence.namespace)
                return last
            return self._trip(evidence)

    def _trip(self, evidence: Evidence) -> TripState:
        try:
            state = self._view.on_loop(
                functools.partial(trip, self._client, self._id, evidence, self._who),
                timeout=self._view.every_seconds + 10,
            )
        except Exception as exc:
            raise TripwireStateUnknown(
                f"could not trip the shared-BookKeeper tripwire {self._id} for {evidence.describe()}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._view.record(state)
        return state

    def _log_change(self, was: TripState | None, now: TripState) -> None:
        if was is not None and was.tripped != now.tripped:
            log.warning("shared BookKeeper tripwire %s: %s", self._id, now.describe())

    async def refresh(self) -> TripState:
        return await self._view.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Read it every ``every_seconds`` until ``stop``; a failed read keeps the last state, which goes
        stale (and unknown namespaces wait) if reads keep failing."""
        await self._view.run(stop, "shared BookKeeper tripwire")


def refuses(view: View | None) -> bool:
    """Whether a delete checked while the tripwire was untripped (a ledger or objects of a namespace this
    cluster does not have) must be refused now: it has tripped since. The deleting pools ask it, since a
    grace or a pause may lie between the check and the delete.

    Raises:
        TripwireStateUnknown: this process does not read the tripwire, or has not lately.
    """
    if view is None:
        raise TripwireStateUnknown("this process does not read the shared-BookKeeper tripwire")
    return view.current().tripped
