"""``ledger-deletion demo``: the whole service on the embedded stack, shadow mode first, then live.

1. bring the stack up (installs what is missing); 2. start every pool in shadow mode, on a deletion topic and
task queues of the run's own (:func:`devstack.demo_shadow.run_settings`); 3. write a small Pulsar cluster
into a ZooKeeper chroot of its own, read by an admin emulator of its own, with ledger ids no earlier run is
keyed by (:mod:`devstack.demo_state`: whatever ran on the stack before stays out of sight), and into S3, and
trim it the way PIP-186's mark phase does (publish, then update metadata); 4. wait
until shadow mode has decided every request; 5. print the shadow report (what live mode would delete, per
tenant and namespace, with bytes) and check that ZooKeeper and S3 are unchanged and the live subscription
still holds every message; 6. start the pools in live mode and wait until every request is done and acked;
7. print each ledger's fate in both modes, check storage, and check that live mode deleted exactly the
ledgers, objects and bytes shadow mode said it would; 8. on a cluster of its own, start a watcher beside a
pool set and have a simulated broker trim ledgers whose BookKeeper delete fails: the watcher requests that
orphan, the service deletes it, no scan runs (:mod:`devstack.demo_watch`); 9. print what the audit log kept
of the run, as ``ledger-deletion audit --summary`` does, and check every live decision is in it
(:mod:`devstack.demo_audit`); then point at the Temporal UI. Exit code 0 only when every outcome, every byte
of storage, the two modes' agreement, every fact of the watcher's step and the audit log are as expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from temporalio.client import Client
from temporalio.service import RPCError

from devstack.cluster import SimulatedCluster
from devstack.demo_audit import show_audit
from devstack.demo_shadow import (
    agreement,
    live_backlog,
    report_table,
    run_settings,
    settled_report,
    storage_of,
)
from devstack.demo_state import DemoCluster, LedgerIds, OwnCluster, fresh_ledger_ids, own_cluster
from devstack.demo_watch import run_watch_step
from devstack.scenario import Case, Scenario, build_and_mark
from devstack.stack import HOST, Stack, StackEndpoints, default_state_dir
from ledger_deletion.contracts import DeletionResult, Mode, Outcome
from ledger_deletion.loading import load_settings
from ledger_deletion.ops.dlq import read_dead_letters
from ledger_deletion.rollout import workflow_id
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from workers.ingest import Ingestor
from workers.pools import RunningPools, run_pools

ENDPOINT_FIELDS = {
    "temporal_address",
    "pulsar_url",
    "pulsar_admin_url",
    "zookeeper",
    "s3_endpoint",
    "offload_bucket",
}
STYLE = {
    Outcome.DELETED: "green",
    Outcome.WOULD_DELETE: "green",
    Outcome.ALREADY_DELETED: "green",
    Outcome.SKIPPED_IN_USE: "yellow",
    Outcome.SKIPPED_METADATA_MISMATCH: "yellow",
    Outcome.SKIPPED_NOT_PULSAR: "yellow",
    Outcome.SKIPPED_UNKNOWN_NAMESPACE: "yellow",
    Outcome.SKIPPED_LEFT_OPEN: "yellow",
    Outcome.DEAD_LETTERED: "red",
}
Results = dict[str, DeletionResult]  # by the live workflow id of the case's request
# Ledger ids the demo checks beforehand (devstack.demo_state.fresh_ledger_ids): its scenario takes 19, the
# watcher's step 3 and one per rollover.
LEDGER_IDS = 32


def run_demo(console: Console, *, grace_seconds: float = 3.0, state_dir: Path | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return asyncio.run(_demo(console, grace_seconds, state_dir))


async def _demo(console: Console, grace_seconds: float, state_dir: Path | None) -> int:
    console.rule("[bold]1. embedded stack")
    with console.status("starting ZooKeeper, Temporal, pulsar-lite, S3 and the admin emulator..."):
        stack = Stack(state_dir or default_state_dir())
        endpoints = await asyncio.to_thread(stack.up)
    for name, value in endpoints.as_env().items():
        os.environ.setdefault(name, value)  # boto3 and friends read the standard variables
    # The stack's endpoints, and a deletion topic and task queues of the run's own: both modes see this run's
    # requests only.
    base = run_settings(
        load_settings().with_overrides(
            **endpoints.settings().model_dump(include=ENDPOINT_FIELDS),
            in_use_rechecks=2,
            in_use_recheck_seconds=grace_seconds,
            retry_initial_seconds=0.5,
            retry_max_interval_seconds=5.0,
            ack_schedule_to_start_seconds=15.0,
            mode=Mode.LIVE,
        )
    )
    client = await Client.connect(base.temporal_address, namespace=base.temporal_namespace)
    root_zk = endpoints.zookeeper_client()
    try:
        # State of its own (devstack.demo_state): whatever earlier runs left in the stack stays out of sight.
        root = SimulatedCluster(root_zk, endpoints.s3_client(), bucket=endpoints.offload_bucket)
        ids = await fresh_ledger_ids(client, root.new_ledger_ids, LEDGER_IDS)
        metrics = f"http://{HOST}:{stack.ports.pulsar_metrics}/metrics"  # for the live backlog (step 5)
        with own_cluster(endpoints, base, "demo", pulsar_metrics=metrics) as own:
            return await _steps(console, endpoints, client, own, ids)
    finally:
        # The run's kill switch, made by its live pools: no process reads it again.
        with contextlib.suppress(RPCError):
            await client.get_schedule_handle(base.kill_switch_id).delete()
        root_zk.stop()
        root_zk.close()


async def _steps(
    console: Console, endpoints: StackEndpoints, client: Client, own: OwnCluster, ids: LedgerIds
) -> int:
    """Steps 2 to 9 on the demo's own cluster; the exit code."""
    settings, zk = own.settings, own.zk
    shadow = settings.with_overrides(mode=Mode.SHADOW)
    console.print(
        f"Temporal {settings.temporal_address} (UI {endpoints.temporal_ui_url}), Pulsar {settings.pulsar_url}"
    )
    console.print(
        f"ZooKeeper {settings.zookeeper}, S3 {settings.s3_endpoint}, admin {settings.pulsar_admin_url}"
    )
    run = uuid.uuid4().hex[:8]
    namespace, watch_namespace = f"demo/run-{run}", f"demo/watch-{run}"
    console.rule("[bold]2. pools in shadow mode")
    async with _pools(shadow, client) as running:
        console.print(
            f"every pool running in shadow on {settings.topic}, subscription "
            f"{shadow.ingest_subscription}, task queues {shadow.queue_prefix}-*; the live subscription "
            f"{settings.subscription} is made, not read"
        )

        console.rule("[bold]3. a Pulsar cluster, trimmed the PIP-186 way")
        cluster = DemoCluster(zk, endpoints.s3_client(), bucket=endpoints.offload_bucket, ids=ids)
        with RequestPublisher(settings) as publisher:
            scenario = await asyncio.to_thread(
                build_and_mark, cluster, namespace, publisher.publish, publisher.publish_raw
            )
        before = storage_of(cluster, scenario)
        console.print(
            f"namespace {namespace}: {len(scenario.cases)} requests ({scenario.message_count} messages "
            "incl. duplicates and garbage) published, topic metadata updated"
        )

        console.rule("[bold]4. shadow mode decides every request")
        decided = await _wait(console, client, scenario, Mode.SHADOW)
        shadow_unacked = await _drain(running)
        left_to_live = _ingestor(running).stats.dead_lettered

    console.rule("[bold]5. what live mode would delete")
    runs = len({c.request.workflow_id for c in scenario.cases})
    found, backlog, shadow_letters = await asyncio.gather(
        settled_report(client, namespace, runs),
        live_backlog(settings, scenario.message_count),
        asyncio.to_thread(read_dead_letters, settings),
    )
    console.print(report_table(found))
    console.print(f"[dim]the same table: ledger-deletion report --namespace {namespace}[/dim]")
    changed = [name for name, there in storage_of(cluster, scenario).items() if there != before[name]]
    shadow_wrong = [
        c for c in scenario.cases if decided[c.request.workflow_id].outcome is not _expected(c, Mode.SHADOW)
    ]
    shadow_ok = all(
        (
            _fact(
                console,
                not shadow_wrong,
                f"shadow outcomes as expected: {len(scenario.cases) - len(shadow_wrong)} of "
                f"{len(scenario.cases)}",
            ),
            _fact(
                console,
                not changed,
                f"ZooKeeper and S3 unchanged: {len(before)} ledger znodes and objects checked"
                + (f"; changed: {', '.join(changed)}" if changed else ""),
            ),
            _fact(
                console,
                backlog == scenario.message_count,
                f"live subscription holds {backlog} of {scenario.message_count} messages",
            ),
            _fact(console, shadow_unacked == 0, f"shadow subscription: {shadow_unacked} messages unacked"),
            _fact(
                console,
                not shadow_letters,
                f"dead letters: {len(shadow_letters)} (shadow left {left_to_live} undecodable to live)",
            ),
        )
    )

    console.rule("[bold]6. pools in live mode: the same requests, deleted")
    async with _pools(settings, client) as running:
        console.print(f"every pool running live, subscription {settings.subscription}")
        results = await _wait(console, client, scenario, Mode.LIVE)
        unacked = await _drain(running)
    letters = await asyncio.to_thread(read_dead_letters, settings)
    dead = sum(d.failed_step == "decode" for d in letters)

    console.rule("[bold]7. what happened")
    console.print(_table(scenario, decided, results))
    problems = scenario.check_storage()
    wrong = [c for c in scenario.cases if results[c.request.workflow_id].outcome is not c.expected]
    disagree = agreement(cluster, decided.values(), results.values())
    verdict = "[green]as expected[/green]" if not problems else "[red]" + "; ".join(problems) + "[/red]"
    deleted, kept = scenario.ledgers_deleted, scenario.ledgers_kept
    console.print(
        f"storage: {len(deleted)} ledgers, {len(scenario.objects_deleted)} objects gone; "
        f"{len(kept)} ledgers, {len(scenario.objects_kept)} objects kept: {verdict}"
    )
    would = sum(r.outcome is Outcome.WOULD_DELETE for r in decided.values())
    _fact(
        console,
        not disagree,
        f"live deleted what shadow said: {would} runs, same ledgers, objects and bytes"
        if not disagree
        else "live and shadow disagree: " + "; ".join(disagree),
    )
    console.print(
        f"undecodable payloads sent to {settings.dead_letter_topic}: {dead} of {len(scenario.garbage)}"
        + (f" ({len(letters) - dead} other dead letters)" if len(letters) > dead else "")
    )
    console.print(f"messages left unacked: {unacked}")

    console.rule("[bold]8. an orphan no one asked to delete, caught by the watcher (no scan)")
    watched = await run_watch_step(console, client, endpoints, settings, watch_namespace, ids)
    console.rule("[bold]9. what the audit log kept: ledger-deletion audit --summary")
    audited = await show_audit(console, settings, namespace, scenario.cases)
    query = quote(f'PulsarNamespace="{namespace}" OR PulsarNamespace="{watch_namespace}"')
    console.print(
        f"\nInspect every workflow in the Temporal UI:\n  {endpoints.temporal_ui_url}/namespaces/"
        f"{settings.temporal_namespace}/workflows?query={query}"
    )
    ok = (
        shadow_ok
        and not problems
        and not wrong
        and not disagree
        and unacked == 0
        and dead == len(letters) == len(scenario.garbage)
        and watched
        and audited
    )
    console.print(
        "[bold green]demo passed[/bold green]" if ok else "[bold red]demo found problems[/bold red]"
    )
    return 0 if ok else 1


@contextlib.asynccontextmanager
async def _pools(settings: Settings, client: Client) -> AsyncIterator[RunningPools]:
    """Every pool in this process, for the block; stopped (consumers closed, workers drained) after it."""
    stop = asyncio.Event()
    started: asyncio.Future[RunningPools] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_pools(["all"], settings, stop, client=client, started=started))
    either: list[asyncio.Future[Any]] = [started, task]
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises the start-up error
    try:
        yield started.result()
    finally:
        stop.set()
        await task


def _ingestor(running: RunningPools) -> Ingestor:
    assert running.ingestor is not None
    return running.ingestor


async def _drain(running: RunningPools, timeout: float = 30) -> int:
    """Messages still received but unacked once every ack has had ``timeout`` seconds to land."""
    pending = _ingestor(running).pending
    deadline = time.monotonic() + timeout
    while len(pending) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return len(pending)


def _fact(console: Console, ok: bool, text: str) -> bool:
    console.print(f"{'[green]✓[/green]' if ok else '[red]✗[/red]'} {text}")
    return ok


def _expected(case: Case, mode: Mode) -> Outcome:
    """What the case's run must end with in ``mode``: shadow records WOULD_DELETE where live deletes."""
    if mode is Mode.SHADOW and case.expected is Outcome.DELETED:
        return Outcome.WOULD_DELETE
    return case.expected


async def _wait(console: Console, client: Client, scenario: Scenario, mode: Mode) -> Results:
    """Each case's result in ``mode``, by the live workflow id of its request."""
    ids = {c.request.workflow_id: workflow_id(c.request, mode) for c in scenario.cases}
    results: Results = {}
    started = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"{mode.value} workflows done", total=len(ids))

        async def one(key: str, run_id: str) -> None:
            while True:
                try:
                    handle = client.get_workflow_handle(run_id, result_type=DeletionResult)
                    results[key] = await handle.result()
                    progress.advance(task)
                    return
                except RPCError:  # not started yet: the ingest loop is still on its way to it
                    await asyncio.sleep(0.3)

        async def deferred() -> None:
            while scenario.deferred:
                scenario.run_deferred(started)
                await asyncio.sleep(0.05)

        await asyncio.wait_for(asyncio.gather(deferred(), *(one(k, i) for k, i in ids.items())), timeout=300)
    return results


def _table(scenario: Scenario, decided: Results, results: Results) -> Table:
    table = Table(title=f"ledgers of {scenario.namespace}", show_lines=False)
    for column in ("ledger", "where", "case", "shadow", "live", "as expected", "detail"):
        table.add_column(column, overflow="fold", no_wrap=column in ("shadow", "live"))
    for case in scenario.cases:
        said, result = decided[case.request.workflow_id], results[case.request.workflow_id]
        where = "BookKeeper" if case.request.ledger_type.value == "LEDGER" else "S3"
        expected = [_expected(case, Mode.SHADOW), case.expected]
        match = (
            "[green]yes[/green]"
            if [said.outcome, result.outcome] == expected
            else f"[red]no, expected {' / '.join(expected)}[/red]"
        )
        detail = result.reason or ", ".join(result.deleted_keys)
        if case.copies > 1:
            detail = f"{case.copies} messages, {result.messages_acked} acked. {detail}".strip()
        table.add_row(
            str(case.request.ledger_id),
            where,
            case.label,
            _styled(said.outcome),
            _styled(result.outcome),
            match,
            detail[:60],
        )
    return table


def _styled(outcome: Outcome) -> str:
    style = STYLE[outcome]
    return f"[{style}]{outcome}[/{style}]"
