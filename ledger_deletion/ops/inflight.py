"""PIP-186's "estimated in-flight deletions", per tenant: running workflows plus the subscription's backlog.

What is measured, and from where:

- running workflows: Temporal visibility, ``ExecutionStatus="Running"``, grouped by the ``PulsarTenant``
  search attribute. Each holds its messages unacked until it acks them, so this counts received work.
- backlog (messages published to a deletion topic but not yet acked by the service's subscription): the
  brokers' admin REST ``partitioned-stats`` (``msgBacklog`` of the subscription). The system topic is shared
  by every tenant, so its backlog is reported under ``(system topic)``; a per-namespace topic's backlog
  belongs to its tenant. An admin API without topic stats leaves the backlog unavailable, never guessed (the
  devstack's admin emulator answers them from pulsar-lite's subscription metrics).
- held (optional): received-but-unacked messages each pulsar-pool process holds, scraped from its metrics
  endpoint (``ledger_deletion_pending_acks``). They are the same messages the running workflows hold, seen
  from the Pulsar side, so they are shown beside the total, not added to it.

Every pulsar-pool process also exposes the estimate as the ``ledger_deletion_inflight_estimate`` gauge
(:func:`report_forever`), so operators can alert on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio.client import Client

from ledger_deletion import connections
from ledger_deletion.errors import LedgerDeletionError
from ledger_deletion.observability import metrics
from ledger_deletion.ops.deletions import row_of, visibility_query
from ledger_deletion.settings import Settings
from ledger_deletion.tenancy import tenant_of_topic, tenant_topics

SYSTEM = "(system topic)"

log = logging.getLogger(__name__)


@dataclass
class TenantInflight:
    tenant: str
    running_workflows: int = 0
    backlog: int | None = None  # None: not measurable here

    @property
    def estimate(self) -> int:
        return self.running_workflows + (self.backlog or 0)


@dataclass
class InflightReport:
    tenants: dict[str, TenantInflight] = field(default_factory=dict)
    backlog_source: str = ""
    backlog_error: str = ""
    held_by_pulsar_pools: int | None = None
    held_error: str = ""

    @property
    def total(self) -> int:
        return sum(t.estimate for t in self.tenants.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "tenants": [
                {
                    "tenant": t.tenant,
                    "running_workflows": t.running_workflows,
                    "backlog": t.backlog,
                    "estimate": t.estimate,
                }
                for t in sorted(self.tenants.values(), key=lambda t: t.tenant)
            ],
            "total": self.total,
            "backlog_source": self.backlog_source,
            "backlog_error": self.backlog_error,
            "held_by_pulsar_pools": self.held_by_pulsar_pools,
            "held_error": self.held_error,
        }


async def running_by_tenant(client: Client, tenant: str | None) -> Counter[str]:
    counts: Counter[str] = Counter()
    async for execution in client.list_workflows(visibility_query(tenant=tenant, running=True)):
        counts[row_of(execution).tenant or "unknown"] += 1
    return counts


def subscription_backlog(settings: Settings, topics: list[str]) -> dict[str, int]:
    """Backlog of the service's subscription per topic, from the admin REST (raises when unavailable)."""
    admin = connections.admin_client(settings)
    try:
        return {topic: admin.subscription_backlog(topic, settings.subscription) for topic in topics}
    finally:
        admin.close()


def held_by_pools(metrics_urls: list[str]) -> int:
    held = 0
    for url in metrics_urls:
        text = httpx.get(url, timeout=5).text
        for line in text.splitlines():
            if line.startswith("ledger_deletion_pending_acks"):
                held += int(float(line.rsplit(" ", 1)[1]))
    return held


async def estimate(
    client: Client, settings: Settings, tenant: str | None = None, metrics_urls: list[str] | None = None
) -> InflightReport:
    report = InflightReport()
    for name, count in (await running_by_tenant(client, tenant)).items():
        report.tenants[name] = TenantInflight(name, running_workflows=count)
    topics = [settings.topic, *tenant_topics(settings)]
    try:
        backlog = await asyncio.to_thread(subscription_backlog, settings, topics)
        report.backlog_source = (
            f"admin REST {settings.pulsar_admin_url} (subscription {settings.subscription})"
        )
        for topic, count in backlog.items():
            owner = SYSTEM if topic == settings.topic else tenant_of_topic(topic)
            if tenant and owner not in (tenant, SYSTEM):
                continue
            entry = report.tenants.setdefault(owner, TenantInflight(owner))
            entry.backlog = (entry.backlog or 0) + count
    except (LedgerDeletionError, httpx.HTTPError, ValueError) as exc:
        report.backlog_error = f"backlog unavailable: {exc}"
    if metrics_urls:
        try:
            report.held_by_pulsar_pools = held_by_pools(metrics_urls)
        except (httpx.HTTPError, ValueError, IndexError) as exc:
            report.held_error = f"pending-ack gauge unavailable: {type(exc).__name__}: {exc}"
    return report


async def report_forever(
    client: Client, settings: Settings, stop: asyncio.Event, every_seconds: float
) -> None:
    """Keep ``ledger_deletion_inflight_estimate`` fresh: estimate every ``every_seconds`` until ``stop``.

    Every pulsar-pool process reports the same cluster-wide estimate; alert on ``max`` over processes.
    """
    while not stop.is_set():
        try:
            report = await estimate(client, settings)
        except Exception as exc:  # a visibility query that failed: keep the last estimate, try again later
            log.warning("in-flight estimate failed: %s: %s", type(exc).__name__, exc)
        else:
            metrics.current().inflight_estimated(
                {t.tenant: t.estimate for t in report.tenants.values()},
                backlog_measured=not report.backlog_error,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_seconds)
