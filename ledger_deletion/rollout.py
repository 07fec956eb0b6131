"""Which requests a process deletes for real: its mode, and the live allow- and deny-lists.

A process in ``shadow`` mode runs every request in shadow. A process in ``live`` mode runs in live only the
requests of the tenants and namespaces its scope admits (``LEDGER_DELETION_LIVE_ALLOW``, everything when
empty, less ``LEDGER_DELETION_LIVE_DENY``); the others it runs in shadow and dead-letters to be replayed once
the list is widened (``MessageRef.replay_reason``): a live process consumes from the live subscription, and
acking such a request without deleting would lose it for good.

Shadow runs have workflow ids of their own (``ledger-deletion-shadow/…``), so a shadow run never joins a
live one, and a request seen by a shadow process and a live process is decided once in each mode.

Pure module: the ingest and the CLI use it; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ledger_deletion.contracts import Mode
from ledger_deletion.request import PendingDeleteLedgerInfo

LIVE_PREFIX = "ledger-deletion/"
SHADOW_PREFIX = "ledger-deletion-shadow/"
# The failed step of a dead letter kept for the live allow-list's widening.
ALLOW_LIST_STEP = "live_allow_list"


def workflow_id(request: PendingDeleteLedgerInfo, mode: Mode) -> str:
    """The request's workflow id in ``mode``: a shadow run's is the live one under its own prefix."""
    live = request.workflow_id
    if mode is Mode.LIVE:
        return live
    assert live.startswith(LIVE_PREFIX)
    return SHADOW_PREFIX + live.removeprefix(LIVE_PREFIX)


def parse_scope_entries(value: str) -> tuple[str, ...]:
    """``tenant`` or ``tenant/namespace`` entries, comma-separated; raises ValueError for anything else.

    No patterns: a canary is a short explicit list, and a pattern that matches more than meant would delete
    more than meant.
    """
    entries = tuple(item.strip().strip("/") for item in value.split(",") if item.strip())
    for entry in entries:
        parts = entry.split("/")
        if "://" in entry or not 1 <= len(parts) <= 3 or not all(parts) or any(c in entry for c in "*? "):
            raise ValueError(
                f"{entry!r} is not a tenant or a namespace (tenant/namespace, or tenant/cluster/namespace)"
            )
    return entries


@dataclass(frozen=True)
class LiveScope:
    """The tenants and namespaces a live process deletes in; each entry a tenant or a full namespace."""

    allow: frozenset[str] = frozenset()  # empty: every tenant
    deny: frozenset[str] = frozenset()

    @classmethod
    def of(cls, allow: Iterable[str], deny: Iterable[str]) -> LiveScope:
        return cls(frozenset(allow), frozenset(deny))

    def excludes(self, request: PendingDeleteLedgerInfo) -> str:
        """Why the request is not deleted live here ("" when it is)."""
        names = {request.tenant, request.namespace}
        if denied := sorted(names & self.deny):
            return f"{denied[0]} is on the live deny-list (LEDGER_DELETION_LIVE_DENY)"
        if self.allow and not names & self.allow:
            return f"{request.namespace} is outside the live allow-list (LEDGER_DELETION_LIVE_ALLOW)"
        return ""

    def describe(self) -> str:
        allow = ", ".join(sorted(self.allow)) or "every tenant"
        deny = f", except {', '.join(sorted(self.deny))}" if self.deny else ""
        return f"{allow}{deny}"


def run_mode(process: Mode, scope: LiveScope, request: PendingDeleteLedgerInfo) -> tuple[Mode, str]:
    """The mode of the request's run, and for a live process's request outside its scope the reason its
    message is dead-lettered for replay ("" otherwise)."""
    if process is Mode.SHADOW:
        return Mode.SHADOW, ""
    excluded = scope.excludes(request)
    if not excluded:
        return Mode.LIVE, ""
    return Mode.SHADOW, f"{excluded}: decided in shadow, nothing deleted; replay it once the list is widened"
