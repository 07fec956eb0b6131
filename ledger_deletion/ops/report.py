"""``ledger-deletion report``: what the deletions came to, per tenant and namespace, from visibility alone.

In shadow mode this is the question a rollout starts with: what would live mode delete? Each shadow run that
reached ``WOULD_DELETE`` counts with its ledger id and its bytes (``DeletionBytes``: the BookKeeper metadata's
length, the objects' sizes from HEAD), each other outcome by name. In live mode the same for ``DELETED``.
Every figure comes from search attributes, so a report over many thousands of runs reads no history.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from ledger_deletion.contracts import Mode, Outcome
from ledger_deletion.ops.deletions import DeletionRow, row_of, visibility_query

RUNNING = "RUNNING"  # a run without an outcome yet


def deleting_outcome(mode: Mode) -> Outcome:
    return Outcome.WOULD_DELETE if mode is Mode.SHADOW else Outcome.DELETED


@dataclass
class NamespaceReport:
    tenant: str
    namespace: str
    ledgers: list[int] = field(default_factory=list)  # BookKeeper ledgers (would be) deleted
    offloaded: list[int] = field(default_factory=list)  # offloaded ledgers whose objects (would) go
    bytes: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # every run, by outcome (RUNNING: none yet)

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "namespace": self.namespace,
            "ledgers": sorted(self.ledgers),
            "offloaded_ledgers": sorted(self.offloaded),
            "bytes": self.bytes,
            "outcomes": dict(sorted(self.outcomes.items())),
        }


@dataclass
class Report:
    mode: Mode
    query: str
    namespaces: dict[str, NamespaceReport] = field(default_factory=dict)

    @property
    def deleting(self) -> Outcome:
        return deleting_outcome(self.mode)

    @property
    def ledgers(self) -> int:
        return sum(len(n.ledgers) for n in self.namespaces.values())

    @property
    def offloaded(self) -> int:
        return sum(len(n.offloaded) for n in self.namespaces.values())

    @property
    def bytes(self) -> int:
        return sum(n.bytes for n in self.namespaces.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "outcome": self.deleting.value,
            "query": self.query,
            "namespaces": [n.as_json() for _, n in sorted(self.namespaces.items())],
            "total": {"ledgers": self.ledgers, "offloaded_ledgers": self.offloaded, "bytes": self.bytes},
        }


def report_of(rows: list[DeletionRow], mode: Mode, query: str) -> Report:
    """Group the latest run of each workflow id by namespace."""
    latest: dict[str, DeletionRow] = {}
    for row in rows:
        seen = latest.get(row.workflow_id)
        if seen is None or (row.started and seen.started and row.started > seen.started):
            latest[row.workflow_id] = row
    report = Report(mode, query)
    for row in latest.values():
        entry = report.namespaces.setdefault(row.namespace, NamespaceReport(row.tenant, row.namespace))
        outcome = row.outcome or RUNNING
        entry.outcomes[outcome] += 1
        if outcome != report.deleting.value or row.ledger_id is None:
            continue
        (entry.offloaded if row.ledger_type == "OFFLOAD_LEDGER" else entry.ledgers).append(row.ledger_id)
        entry.bytes += row.bytes or 0
    return report


async def report(
    client: Client, mode: Mode, *, tenant: str | None = None, namespace: str | None = None
) -> Report:
    query = visibility_query(mode=mode.value, tenant=tenant, namespace=namespace)
    rows = [row_of(execution) async for execution in client.list_workflows(query)]
    return report_of(rows, mode, query)
