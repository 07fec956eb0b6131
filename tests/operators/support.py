"""Support shared by the operator tests: the observed service, orphan requests, their results, metrics."""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from ledger_deletion.contracts import DeletionResult
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.support import wait_for_result
from workers.pools import RunningPools


@dataclass
class Observed:
    settings: Settings
    client: Client
    running: RunningPools
    spans: InMemorySpanExporter
    metrics_url: str
    tenant_topic: str


def orphan_requests(
    cluster: SimulatedCluster, tenant: str, *, offloaded: bool = True, namespace: str | None = None
) -> tuple[str, list[PendingDeleteLedgerInfo]]:
    """A topic of three ledgers, the two oldest trimmed (the middle one also offloaded): their requests.

    In a namespace of its own unless ``namespace`` (``tenant/ns``) is given: a namespace's deletion topic
    takes requests of that namespace only.
    """
    unique = uuid.uuid4().hex[:6]
    topic = f"{namespace}/orders-{unique}" if namespace else f"{tenant}/ns-{unique}/orders"
    ids = cluster.new_ledger_ids(3)
    cluster.create_topic(topic, ids, offloaded=[ids[1]] if offloaded else [])
    requests = cluster.requests_for_trim(topic, ids[:2])
    cluster.remove_ledgers_from_metadata(topic, ids[:2])
    return topic, requests


async def results_of(client: Client, requests: list[PendingDeleteLedgerInfo]) -> dict[str, DeletionResult]:
    ids = sorted({r.workflow_id for r in requests})
    results = await asyncio.gather(*(wait_for_result(client, i) for i in ids))
    return dict(zip(ids, results, strict=True))


def scrape(url: str) -> str:
    return httpx.get(url, timeout=5).text


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample_labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line.split("}")[0]))
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total
