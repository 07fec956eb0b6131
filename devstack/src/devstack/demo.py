"""``ledger-deletion demo``: the whole service on the embedded stack, start to finish, in about a minute.

1. bring the stack up (installs what is missing); 2. write a small Pulsar cluster into ZooKeeper and S3;
3. start every pool; 4. trim the cluster the way PIP-186's mark phase does (publish, then update metadata);
5. wait until every request is done and acked; 6. print each ledger's fate and check storage; 7. on a cluster
of its own, start a watcher beside a pool set and have a simulated broker trim ledgers whose BookKeeper delete
fails: the watcher requests that orphan, the service deletes it, no scan runs (:mod:`devstack.demo_watch`);
8. point at the Temporal UI. Exit code 0 only when every outcome, every byte of storage and every fact of the
watcher's step is as expected.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from urllib.parse import quote

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from temporalio.client import Client
from temporalio.service import RPCError

from devstack.cluster import SimulatedCluster
from devstack.demo_watch import run_watch_step
from devstack.scenario import Scenario, build_and_mark
from devstack.stack import Stack, default_state_dir
from ledger_deletion.contracts import DeletionResult, Outcome
from ledger_deletion.settings import load_settings
from ledger_deletion.submit import RequestPublisher
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
    Outcome.ALREADY_DELETED: "green",
    Outcome.SKIPPED_IN_USE: "yellow",
    Outcome.SKIPPED_METADATA_MISMATCH: "yellow",
    Outcome.SKIPPED_NOT_PULSAR: "yellow",
    Outcome.DEAD_LETTERED: "red",
}


def run_demo(console: Console, *, grace_seconds: float = 3.0, state_dir: Path | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return asyncio.run(_demo(console, grace_seconds, state_dir))


async def _demo(console: Console, grace_seconds: float, state_dir: Path | None) -> int:
    console.rule("[bold]1. embedded stack")
    with console.status("starting ZooKeeper, Temporal, pulsar-lite, S3 and the admin emulator..."):
        endpoints = await asyncio.to_thread(Stack(state_dir or default_state_dir()).up)
    for name, value in endpoints.as_env().items():
        os.environ.setdefault(name, value)  # boto3 and friends read the standard variables
    # The environment still applies (e.g. a private LEDGER_DELETION_TOPIC); the stack's endpoints win.
    settings = load_settings().with_overrides(
        **endpoints.settings().model_dump(include=ENDPOINT_FIELDS),
        in_use_rechecks=2,
        in_use_recheck_seconds=grace_seconds,
        retry_initial_seconds=0.5,
        retry_max_interval_seconds=5.0,
        ack_schedule_to_start_seconds=15.0,
    )
    console.print(
        f"Temporal {settings.temporal_address} (UI {endpoints.temporal_ui_url}), Pulsar {settings.pulsar_url}"
    )
    console.print(
        f"ZooKeeper {settings.zookeeper}, S3 {settings.s3_endpoint}, admin {settings.pulsar_admin_url}"
    )

    console.rule("[bold]2. pools")
    stop = asyncio.Event()
    started: asyncio.Future[RunningPools] = asyncio.get_running_loop().create_future()
    client = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
    pools = asyncio.create_task(run_pools(["all"], settings, stop, client=client, started=started))
    running = await started
    console.print(f"workflow, pulsar, bookkeeper and offload pools running; consuming {settings.topic}")

    console.rule("[bold]3. a Pulsar cluster, trimmed the PIP-186 way")
    zk = endpoints.zookeeper_client()
    stamp = time.strftime("%H%M%S")
    namespace, watch_namespace = f"demo/run-{stamp}", f"demo/watch-{stamp}"
    try:
        cluster = SimulatedCluster(zk, endpoints.s3_client(), bucket=endpoints.offload_bucket)
        with RequestPublisher(settings) as publisher:
            scenario = await asyncio.to_thread(
                build_and_mark, cluster, namespace, publisher.publish, publisher.publish_raw
            )
        console.print(
            f"namespace {namespace}: {len(scenario.cases)} requests ({scenario.message_count} messages incl. "
            f"duplicates and garbage) published, topic metadata updated"
        )

        console.rule("[bold]4. waiting for every request")
        results = await _wait(console, client, scenario)
        assert running.ingestor is not None
        deadline = time.monotonic() + 30
        while len(running.ingestor.pending) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        unacked = len(running.ingestor.pending)

        console.rule("[bold]5. what happened")
        console.print(_table(scenario, results))
        problems = scenario.check_storage()
        wrong = [c for c in scenario.cases if results[c.request.workflow_id].outcome is not c.expected]
        dead = running.ingestor.stats.dead_lettered
        verdict = "[green]as expected[/green]" if not problems else "[red]" + "; ".join(problems) + "[/red]"
        deleted, kept = scenario.ledgers_deleted, scenario.ledgers_kept
        console.print(
            f"storage: {len(deleted)} ledgers, {len(scenario.objects_deleted)} objects gone; "
            f"{len(kept)} ledgers, {len(scenario.objects_kept)} objects kept: {verdict}"
        )
        console.print(
            f"undecodable payloads sent to {settings.dead_letter_topic}: {dead} of {len(scenario.garbage)}"
        )
        console.print(f"messages left unacked: {unacked}")

        console.rule("[bold]6. an orphan no one asked to delete, caught by the watcher (no scan)")
        watched = await run_watch_step(
            console, client, endpoints, settings, watch_namespace, cluster.new_ledger_ids
        )
        query = quote(f'PulsarNamespace="{namespace}" OR PulsarNamespace="{watch_namespace}"')
        console.print(
            f"\nInspect every workflow in the Temporal UI:\n  {endpoints.temporal_ui_url}/namespaces/"
            f"{settings.temporal_namespace}/workflows?query={query}"
        )
        ok = not problems and not wrong and unacked == 0 and dead >= len(scenario.garbage) and watched
        console.print(
            "[bold green]demo passed[/bold green]" if ok else "[bold red]demo found problems[/bold red]"
        )
        return 0 if ok else 1
    finally:
        stop.set()
        await pools
        zk.stop()
        zk.close()


async def _wait(console: Console, client: Client, scenario: Scenario) -> dict[str, DeletionResult]:
    ids = sorted({c.request.workflow_id for c in scenario.cases})
    results: dict[str, DeletionResult] = {}
    started = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("workflows done", total=len(ids))

        async def one(workflow_id: str) -> None:
            while True:
                try:
                    handle = client.get_workflow_handle(workflow_id, result_type=DeletionResult)
                    results[workflow_id] = await handle.result()
                    progress.advance(task)
                    return
                except RPCError:  # not started yet: the ingest loop is still on its way to it
                    await asyncio.sleep(0.3)

        async def deferred() -> None:
            while scenario.deferred:
                scenario.run_deferred(started)
                await asyncio.sleep(0.05)

        await asyncio.wait_for(asyncio.gather(deferred(), *(one(i) for i in ids)), timeout=300)
    return results


def _table(scenario: Scenario, results: dict[str, DeletionResult]) -> Table:
    table = Table(title=f"ledgers of {scenario.namespace}", show_lines=False)
    for column in ("ledger", "where", "case", "outcome", "as expected", "detail"):
        table.add_column(column, overflow="fold")
    for case in scenario.cases:
        result = results[case.request.workflow_id]
        where = "BookKeeper" if case.request.ledger_type.value == "LEDGER" else "S3"
        match = (
            "[green]yes[/green]"
            if result.outcome is case.expected
            else f"[red]no, expected {case.expected}[/red]"
        )
        detail = result.reason or ", ".join(result.deleted_keys)
        if case.copies > 1:
            detail = f"{case.copies} messages, {result.messages_acked} acked. {detail}".strip()
        style = STYLE[result.outcome]
        table.add_row(
            str(case.request.ledger_id),
            where,
            case.label,
            f"[{style}]{result.outcome}[/{style}]",
            match,
            detail[:70],
        )
    return table
