"""PIP-186's "estimated in-flight deletions", per tenant: running workflows plus the subscription's backlog.

What is measured, and from where:

- running workflows: Temporal visibility, ``ExecutionStatus="Running"``, grouped by the ``PulsarTenant``
  search attribute. Each holds its messages unacked until it acks them, so this counts received work.
- backlog (messages published to a deletion topic but not yet acked by the service's subscription): the
  brokers' admin REST ``partitioned-stats`` (``msgBacklog`` of the subscription). The system topic is shared
  by every tenant, so its backlog is reported under ``(system topic)``; a per-namespace topic's backlog
  belongs to its tenant. pulsar-lite (the embedded broker) has no admin REST: there the backlog is reported
  as unavailable, never guessed.
- held (optional): received-but-unacked messages each pulsar-pool process holds, scraped from its metrics
  endpoint (``ledger_deletion_pending_acks``). They are the same messages the running workflows hold, seen
  from the Pulsar side, so they are shown beside the total, not added to it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio.client import Client

from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient, topic_path
from ledger_deletion.errors import LedgerDeletionError
from ledger_deletion.ops.deletions import row_of, visibility_query
from ledger_deletion.settings import Settings
from ledger_deletion.tenancy import tenant_of_topic, tenant_topics

SYSTEM = "(system topic)"


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
    admin = PulsarAdminClient(
        settings.pulsar_admin_url, settings.pulsar_token_value, settings.admin_timeout_seconds
    )
    try:
        backlog: dict[str, int] = {}
        for topic in topics:
            # Internal helper on purpose: it applies the token-across-redirect rule of the admin client.
            response = admin._get(f"{topic_path(topic)}/partitioned-stats", {"perPartition": "false"})
            if not response.found:
                response = admin._get(f"{topic_path(topic)}/stats", {})
            if not response.found or not isinstance(response.body, dict):
                raise LookupError(f"no stats for {topic} (admin API without topic stats)")
            subscription = (response.body.get("subscriptions") or {}).get(settings.subscription) or {}
            backlog[topic] = int(subscription.get("msgBacklog", 0))
        return backlog
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
        backlog = subscription_backlog(settings, topics)
        report.backlog_source = (
            f"admin REST {settings.pulsar_admin_url} (subscription {settings.subscription})"
        )
        for topic, count in backlog.items():
            owner = SYSTEM if topic == settings.topic else tenant_of_topic(topic)
            if tenant and owner not in (tenant, SYSTEM):
                continue
            entry = report.tenants.setdefault(owner, TenantInflight(owner))
            entry.backlog = (entry.backlog or 0) + count
    except (LedgerDeletionError, LookupError, httpx.HTTPError, ValueError) as exc:
        report.backlog_error = f"backlog unavailable: {exc}"
    if metrics_urls:
        try:
            report.held_by_pulsar_pools = held_by_pools(metrics_urls)
        except (httpx.HTTPError, ValueError, IndexError) as exc:
            report.held_error = f"pending-ack gauge unavailable: {type(exc).__name__}: {exc}"
    return report
