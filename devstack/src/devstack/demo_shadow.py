"""The demo's rollout steps: shadow mode decides the requests first, then live mode deletes, and they agree.

What an operator does before letting the service delete (docs/rollout.md): run it in shadow, read the report
of what live mode would delete, check that shadow touched nothing and left every request on the live
subscription, then switch to live. The demo does that on its own deletion topic and task queues
(:func:`run_settings`): a new subscription starts at the earliest retained message, so on the shared default
topic the shadow subscription would take in every request other sessions ever left there.

The checks here compare what the two modes recorded (``WOULD_DELETE`` with its keys and bytes against
``DELETED`` with its keys and bytes) and what storage holds, so the demo's exit code can require both.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable

from rich.table import Table
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.scenario import Scenario
from ledger_deletion.contracts import DeletionResult, Mode, Outcome
from ledger_deletion.ops.inflight import subscription_backlog
from ledger_deletion.ops.report import RUNNING, Report, report
from ledger_deletion.request import LedgerType
from ledger_deletion.settings import Settings

__all__ = [
    "agreement",
    "live_backlog",
    "report_table",
    "run_settings",
    "settled_report",
    "storage_of",
]

Key = tuple[str, int]  # (ledger type, ledger id): one request's ledger, the same in both modes


def run_settings(settings: Settings) -> Settings:
    """The demo's own deployment: a deletion topic (so a dead-letter topic) and task queues of its own."""
    run = uuid.uuid4().hex[:8]
    return settings.with_overrides(
        topic=f"persistent://pulsar/system/__ledger_deletion_demo_{run}",
        task_queue_prefix=f"ld-demo-{run}",
        dlq_topic="",
        tenant_topics="",  # the run's requests are on its topic alone
        topic_pattern="",
    )


def storage_of(cluster: SimulatedCluster, scenario: Scenario) -> dict[str, bool]:
    """Whether each ledger znode and offloaded object the scenario names exists, by name."""
    found = {
        f"ledger {i}": cluster.ledger_exists(i)
        for i in sorted(scenario.ledgers_deleted | scenario.ledgers_kept)
    }
    for bucket, key in scenario.objects_deleted + scenario.objects_kept:
        found[f"s3://{bucket}/{key}"] = cluster.object_exists(key, bucket)
    return found


def key_exists(cluster: SimulatedCluster, key: str) -> bool:
    """A deleted or would-be-deleted key as a run records it: ``s3://bucket/key`` or a ledger's znode path."""
    if key.startswith("s3://"):
        bucket, _, name = key.removeprefix("s3://").partition("/")
        return cluster.object_exists(name, bucket)
    return cluster.zk.exists(key) is not None


async def live_backlog(settings: Settings, expected: int, timeout: float = 10.0) -> int:
    """The live subscription's backlog on the deletion topic, from the admin REST's topic stats.

    The stats come from the broker's metrics, which lag a moment behind the topic: ask until they show
    ``expected`` or ``timeout`` passes, and return the last answer.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = await asyncio.to_thread(subscription_backlog, settings, [settings.topic])
        count = found[settings.topic]
        if count == expected or time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.5)


async def settled_report(client: Client, namespace: str, runs: int, timeout: float = 15.0) -> Report:
    """The shadow report of ``namespace`` once visibility lists all ``runs`` runs with their outcomes.

    Visibility is updated after a workflow closes, a moment behind its result.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = await report(client, Mode.SHADOW, namespace=namespace)
        counted = sum(sum(n.outcomes.values()) - n.outcomes[RUNNING] for n in found.namespaces.values())
        if counted >= runs or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


def report_table(found: Report) -> Table:
    """``ledger-deletion report``'s rows: per tenant and namespace, what live mode would delete."""
    table = Table(title=f"what live mode would delete ({found.deleting.value})")
    for column in ("tenant", "namespace", "ledgers", "offloaded", "bytes", "other outcomes"):
        table.add_column(column, justify="right" if column in ("ledgers", "offloaded", "bytes") else "left")
    for _, entry in sorted(found.namespaces.items()):
        others = ", ".join(f"{k} {v}" for k, v in sorted(entry.outcomes.items()) if k != found.deleting.value)
        table.add_row(
            entry.tenant,
            entry.namespace,
            str(len(entry.ledgers)),
            str(len(entry.offloaded)),
            f"{entry.bytes} B",
            others,
        )
    return table


def _by_key(results: Iterable[DeletionResult], outcome: Outcome) -> dict[Key, DeletionResult]:
    return {(r.ledger_type, r.ledger_id): r for r in results if r.outcome is outcome}


def agreement(
    cluster: SimulatedCluster, shadow: Iterable[DeletionResult], live: Iterable[DeletionResult]
) -> list[str]:
    """How live mode's deletions differ from shadow mode's ``WOULD_DELETE`` (empty when they agree).

    The same ledgers, the same objects (an offloaded ledger's keys), the same bytes, and every key shadow
    named gone from ZooKeeper or S3.
    """
    would, deleted = _by_key(shadow, Outcome.WOULD_DELETE), _by_key(live, Outcome.DELETED)
    problems = [f"{t} {i}: shadow would delete it, live did not" for t, i in sorted(would.keys() - deleted)]
    problems += [f"{t} {i}: live deleted it, shadow would not" for t, i in sorted(deleted.keys() - would)]
    for key in sorted(would.keys() & deleted.keys()):
        said, done = would[key], deleted[key]
        offloaded = key[0] == LedgerType.OFFLOAD_LEDGER.value  # a BookKeeper delete records no keys
        if offloaded and sorted(done.deleted_keys) != sorted(said.would_delete_keys):
            problems.append(
                f"{key[0]} {key[1]}: deleted {done.deleted_keys}, shadow said {said.would_delete_keys}"
            )
        if done.bytes != said.bytes:
            problems.append(f"{key[0]} {key[1]}: {done.bytes} bytes deleted, shadow said {said.bytes}")
        problems += [f"{k} still exists" for k in said.would_delete_keys if key_exists(cluster, k)]
    return problems
